// locked_store, the reference model, against the store conformance suite and the inspection one.
#include <catch2/catch.hpp>

#include <idem/store/locked.hpp>
#include <idem/testing/inspect_conformance.hpp>
#include <idem/testing/store_conformance.hpp>

namespace {

struct locked_store_factory {
  static constexpr bool bounded = true;
  idem::locked_store make(const idem::testing::store_limits& limits) {
    return idem::locked_store{idem::locked_store::options{limits.max_records, limits.max_bytes}};
  }
};

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(locked_store_factory)
IDEM_INSPECT_CONFORMANCE_TESTS(locked_store_factory)
