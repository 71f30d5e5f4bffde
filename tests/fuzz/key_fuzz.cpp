// Fuzz target: idempotency key validation (idem/core/key.hpp), and what idempotent answers for a
// key.
//
// Properties, for every input:
//  * is_valid_key agrees with the rule spelled out independently here: 1 to max_length bytes,
//    each visible ASCII (0x21-0x7E), for the default limit and for a limit the input picks;
//  * key_buffer accepts exactly the valid keys, holds them byte for byte, and copies them intact;
//    it refuses the others with std::invalid_argument and nothing else;
//  * idempotent answers a refused key with invalid_key (400), runs nothing and stores nothing.
#include <idem/idem.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"

namespace {

using idem_fuzz::fuzz_require;

bool reference_valid(std::string_view key, std::size_t max_length) {
  if (key.empty() || key.size() > max_length) return false;
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x21 || byte > 0x7e) return false;
  }
  return true;
}

struct fuzz_policies : idem::default_policies {
  using clock = idem::manual_clock;
};

struct counting_handler {
  int* runs;
  std::string operator()(const std::string& body) const {
    ++*runs;
    return body;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  idem_fuzz::input_reader in(data, size);
  const std::size_t limit = in.byte();
  const std::string_view key = in.rest();

  const bool valid = reference_valid(key, idem::max_key_length);
  fuzz_require(idem::is_valid_key(key) == valid, "is_valid_key matches the written-out rule");
  fuzz_require(idem::is_valid_key(key, limit) == reference_valid(key, limit),
               "is_valid_key(key, max_length) matches the rule for that limit");

  try {
    const idem::key_buffer held(key);
    fuzz_require(valid, "key_buffer accepts only valid keys");
    fuzz_require(held.view() == key && held.size() == key.size(), "key_buffer holds the key");
    const idem::key_buffer copy = held;  // NOLINT(performance-unnecessary-copy-initialization)
    fuzz_require(copy == held && copy.view() == key, "a copied key_buffer holds the same key");
  } catch (const std::invalid_argument&) {
    fuzz_require(!valid, "key_buffer refuses only invalid keys");
  }

  if (!valid) {
    // One wrapper for the whole run: nothing may ever be stored in it, which is the property.
    static int runs = 0;
    static idem::idempotent<counting_handler, fuzz_policies> guarded{counting_handler{&runs}};
    const auto outcome = guarded("scope", key, std::string("body"));
    fuzz_require(outcome.verdict() == idem::verdict::invalid_key,
                 "idempotent answers an invalid key with invalid_key");
    fuzz_require(outcome.http_status() == 400, "an invalid key is a 400");
    fuzz_require(runs == 0 && guarded.store().statistics().records == 0,
                 "an invalid key runs nothing and stores nothing");
  }
  return 0;
}
