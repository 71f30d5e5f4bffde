// memory_store, the lock-free default store, against the store conformance suite, plus what is
// particular to it: statistics, the record overhead, and that the bucketing hash is keyed.
#include <catch2/catch.hpp>

#include <idem/store/memory.hpp>
#include <idem/testing/store_conformance.hpp>

#include <atomic>
#include <string>
#include <thread>

namespace {

struct memory_store_factory {
  static constexpr bool bounded = true;
  idem::memory_store make(const idem::testing::store_limits& limits) {
    idem::memory_store::limits bounds;
    bounds.max_records = limits.max_records;
    bounds.max_bytes = limits.max_bytes;
    bounds.expected_records = 1024;
    return idem::memory_store{bounds};
  }
};

}  // namespace

IDEM_STORE_CONFORMANCE_TESTS(memory_store_factory)

using namespace std::chrono_literals;

namespace {

const idem::store_time start{std::chrono::seconds{1767225600}};

idem::digest print(std::uint8_t seed) {
  std::uint8_t bytes[16] = {seed};
  return idem::digest{bytes};
}

}  // namespace

TEST_CASE("memory_store statistics follow records and bytes", "[memory_store]") {
  idem::memory_store store;
  CHECK(store.statistics().records == 0);
  const auto claimed = store.claim({"scope", "key", print(1), start, 30s, 24h});
  CHECK(store.statistics().records == 1);
  CHECK(store.statistics().bytes == 8);
  REQUIRE(store.checkpoint({"scope", "key", claimed.fence}, "step", start + 30s));
  CHECK(store.statistics().bytes == 12);
  REQUIRE(store.complete({"scope", "key", claimed.fence}, std::string(100, 'x'), start));
  CHECK(store.statistics().bytes == 108);
  CHECK(store.sweep(start + 24h) == 1);
  CHECK(store.statistics().records == 0);
  CHECK(store.statistics().bytes == 0);
}

TEST_CASE("sweep removes only what has expired, however much is live", "[memory_store]") {
  idem::memory_store store;
  for (int i = 0; i < 5000; ++i) {
    const auto retention = i % 10 == 0 ? 1h : 24h;
    (void)store.claim({"s", "k" + std::to_string(i), print(1), start, 30s, retention});
  }
  CHECK(store.sweep(start + 1h) == 500);
  CHECK(store.sweep(start + 1h) == 0);
  CHECK(store.statistics().records == 4500);
  // A record claimed again after it expired is kept for its new retention.
  (void)store.claim({"s", "k1", print(1), start + 24h, 30s, 24h});
  CHECK(store.sweep(start + 24h) == 4499);
  CHECK(store.find("s", "k1", start + 24h));
}

TEST_CASE("a thread paused inside an operation does not stop the others",
          "[memory_store]"
          "[concurrency]") {
  idem::memory_store store;
  std::atomic<bool> paused{false};
  std::atomic<bool> go_on{false};
  // Holding an epoch pin is what a thread preempted in the middle of claim or find looks like.
  std::thread sleeper([&] {
    idem::detail::epoch_guard pinned;
    (void)store.find("s", "k0", start);
    paused = true;
    while (!go_on)
      std::this_thread::yield();
  });
  while (!paused)
    std::this_thread::yield();
  for (int i = 0; i < 20'000; ++i) {
    const std::string key = "k" + std::to_string(i);
    const auto claimed = store.claim({"s", key, print(1), start, 30s, 24h});
    REQUIRE(claimed.status == idem::claim_status::claimed);
    REQUIRE(store.complete({"s", key, claimed.fence}, "done", start));
  }
  CHECK(store.statistics().records == 20'000);
  go_on = true;
  sleeper.join();
}

TEST_CASE("the bucketing hash is keyed: another key scatters the same inputs differently",
          "[memory_store]") {
  const idem::detail::siphash_key one{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
  const idem::detail::siphash_key two{1, 2};
  auto hash = [](idem::detail::siphash_key key, std::string_view text) {
    idem::detail::siphash13 h(key);
    h.update(text);
    return h.finish();
  };
  int same = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string text = "key-" + std::to_string(i);
    if ((hash(one, text) & 63) == (hash(two, text) & 63)) ++same;
  }
  // Independent keys agree on a 6-bit bucket about 1 time in 64.
  CHECK(same < 50);
  // Streaming in pieces gives the one-shot value.
  idem::detail::siphash13 pieces(one);
  pieces.update("key");
  pieces.update("-12345678901");
  CHECK(pieces.finish() == hash(one, "key-12345678901"));
}

TEST_CASE("SipHash-1-3 one-shot and streamed agree at every length and split", "[memory_store]") {
  const idem::detail::siphash_key key{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
  std::string text;
  for (int length = 0; length < 80; ++length) {
    for (int split = 0; split <= length; split += 3) {
      idem::detail::siphash13 streamed(key);
      streamed.update(std::string_view(text).substr(0, static_cast<std::size_t>(split)));
      streamed.update(std::string_view(text).substr(static_cast<std::size_t>(split)));
      CHECK(streamed.finish() == idem::detail::siphash13::hash(key, text.data(), text.size()));
    }
    text.push_back(static_cast<char>(length * 7 + 1));
  }
}
