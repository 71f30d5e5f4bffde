// The other order: every store adapter included from include/ first, the single header after.
// Its headers keep their include guards, so what the adapters already brought in (the store
// contract, digests) is skipped rather than defined a second time.
#include <idem/store/postgres.hpp>
#include <idem/store/redis.hpp>
#include <idem/store/sqlite.hpp>

#include <idem/idem.hpp>

#include "single_header_adapters.hpp"

namespace idem_single_header {

bool adapter_first_translation_unit_sees_one_digest() {
  // The same class from both orders: a record's fingerprint made here compares with one made
  // in the other translation unit (one definition, not two that happen to match).
  const idem::digest made_here = idem::xxh3_128::hash("adapters first");
  return made_here == digest_from_single_header_first("adapters first");
}

}  // namespace idem_single_header
