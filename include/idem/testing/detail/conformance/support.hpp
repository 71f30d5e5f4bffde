// What the conformance cases share: the factory concept, the limits a factory is given, fixed
// times, fingerprints and requests, and the standard and idem headers the cases use. Included
// by idem/testing/store_conformance.hpp.
#ifndef IDEM_TESTING_DETAIL_CONFORMANCE_SUPPORT_HPP
#define IDEM_TESTING_DETAIL_CONFORMANCE_SUPPORT_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/store_conformance.hpp>."
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <idem/core/codec.hpp>
#include <idem/core/request.hpp>
#include <idem/policies.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/idempotent.hpp>
#include <idem/server/inbox.hpp>
#include <idem/store/contract.hpp>
#include <idem/testing/faulty_store.hpp>

namespace idem::testing {

/// What a factory's store may hold, for the capacity cases.
struct store_limits {
  std::size_t max_records = std::numeric_limits<std::size_t>::max();
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
};

/// What IDEM_STORE_CONFORMANCE_TESTS needs of its argument.
template <class F>
concept StoreFactory = std::default_initializable<F> &&
    requires(F& factory, const store_limits& limits) {
  { factory.make(limits) } -> Store;
  { F::bounded } -> std::convertible_to<bool>;
};

namespace conformance {

using namespace std::chrono_literals;

template <class Factory>
using store_of = decltype(std::declval<Factory&>().make(store_limits{}));

inline constexpr std::chrono::nanoseconds lease = 30s;
inline constexpr std::chrono::nanoseconds retention = 24h;

// 2026-01-01T00:00:00Z: manual_clock's default wall start, so direct and wrapped cases agree.
inline store_time start() {
  return store_time{std::chrono::seconds{1767225600}};
}

inline digest print(std::uint8_t seed) {
  std::uint8_t bytes[16];
  for (std::uint8_t i = 0; i < 16; ++i)
    bytes[i] = static_cast<std::uint8_t>(seed * 31 + i);
  return digest{bytes};
}

inline claim_request ask(std::string_view scope, std::string_view key, const digest& fingerprint,
                         store_time now) {
  return claim_request{scope, key, fingerprint, now, lease, retention};
}

inline std::string every_byte() {
  std::string bytes;
  for (int round = 0; round < 3; ++round) {
    for (int b = 0; b < 256; ++b)
      bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

template <class Factory>
store_of<Factory> fresh(Factory& factory, store_limits limits = {}) {
  return factory.make(limits);
}

}  // namespace conformance
}  // namespace idem::testing

#endif  // IDEM_TESTING_DETAIL_CONFORMANCE_SUPPORT_HPP
