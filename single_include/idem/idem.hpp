// idem — exactly-once effect under at-least-once delivery. Single-header edition.
//
// GENERATED FILE — DO NOT EDIT BY HAND.
// Generated from include/ by scripts/amalgamate; edit the headers under include/idem/ and run
// scripts/amalgamate again. Store adapters (idem/store/sqlite.hpp, postgres.hpp, redis.hpp) are
// not part of it: include them from include/ by name.
#pragma once

// begin idem/idem.hpp
// idem — exactly-once effect under at-least-once delivery.
//
// This header includes the whole core: the client side (idem::retrying) and its policies.
// Store adapters that need a client library are included by name, never from here.

// begin idem/attempt.hpp
// One attempt of a retried operation: what it is told, and how its result is judged.
//
// attempt_context is what the wrapped call receives: which attempt this is, the idempotency key
// shared by every attempt of the operation, and how much of the overall deadline is left (so the
// call can set its own timeout and never outlive the operation). classification is a
// classifier's judgement of one result; attempt_record is what the history keeps of it.

#include <chrono>
#include <cstdint>
#include <string_view>

namespace idem {

/// How a classifier judges one attempt's result.
enum class disposition : std::uint8_t {
  success,    // done: return it
  transient,  // failed, and the request did not take effect: safe to repeat
  ambiguous,  // failed, and it may have taken effect (a timeout, a connection lost after
              // sending): repeat only under the same key, or after asking whether it landed
  permanent,  // failed, and repeating cannot help (a 4xx, a bug): return it
};

constexpr std::string_view to_string(disposition d) noexcept {
  switch (d) {
    case disposition::success:
      return "success";
    case disposition::transient:
      return "transient";
    case disposition::ambiguous:
      return "ambiguous";
    case disposition::permanent:
      return "permanent";
  }
  return "unknown";
}

/// A classifier's verdict on one result.
struct classification {
  disposition kind = disposition::success;
  /// The result's code where it has one (HTTP status, error value), for the history; else 0.
  int code = 0;
  /// The dependency misbehaved (timeouts, connection errors, 5xx): what a circuit breaker counts.
  /// A request it rightly refused (4xx) is not its fault.
  bool fault = false;
  /// The raw Retry-After value the result carried, if any. It must stay valid while the result
  /// lives; retrying parses it at once.
  std::string_view retry_after{};
};

/// What the wrapped call is told about the attempt it is making.
class attempt_context {
 public:
  constexpr attempt_context(int attempt, std::string_view key,
                            std::chrono::nanoseconds time_left) noexcept
      : attempt_(attempt), key_(key), time_left_(time_left) {}

  /// 1 for the first attempt.
  constexpr int attempt() const noexcept { return attempt_; }
  constexpr bool is_retry() const noexcept { return attempt_ > 1; }
  /// The idempotency key: the same for every attempt of one operation. Send it with the request.
  constexpr std::string_view key() const noexcept { return key_; }
  /// Time left until the overall deadline, measured as this attempt started.
  constexpr std::chrono::nanoseconds time_left() const noexcept { return time_left_; }

 private:
  int attempt_;
  std::string_view key_;
  std::chrono::nanoseconds time_left_;
};

/// What the history keeps of one attempt.
struct attempt_record {
  int attempt;  // 1 for the first
  disposition kind;
  int code;                              // as classified (HTTP status, error value), else 0
  bool threw;                            // it ended in an exception rather than a value
  std::chrono::nanoseconds started_at;   // since the operation began
  std::chrono::nanoseconds delay_after;  // the wait before the next attempt; zero if none
  bool delay_from_retry_after;           // the wait was the server's Retry-After
};

}  // namespace idem
// end idem/attempt.hpp
// begin idem/grpc_status.hpp
// gRPC status codes as a std::error_code category, so that a gRPC failure is classified by the
// same rules as any other error code (the codes and their meaning: grpc/doc/statuscodes.md).

#include <string>
#include <system_error>

namespace idem {

enum class grpc_status : int {
  ok = 0,
  cancelled = 1,
  unknown = 2,
  invalid_argument = 3,
  deadline_exceeded = 4,
  not_found = 5,
  already_exists = 6,
  permission_denied = 7,
  resource_exhausted = 8,
  failed_precondition = 9,
  aborted = 10,
  out_of_range = 11,
  unimplemented = 12,
  internal = 13,
  unavailable = 14,
  data_loss = 15,
  unauthenticated = 16,
};

namespace detail {

class grpc_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "grpc"; }
  std::string message(int code) const override {
    static constexpr const char* names[] = {"OK",
                                            "CANCELLED",
                                            "UNKNOWN",
                                            "INVALID_ARGUMENT",
                                            "DEADLINE_EXCEEDED",
                                            "NOT_FOUND",
                                            "ALREADY_EXISTS",
                                            "PERMISSION_DENIED",
                                            "RESOURCE_EXHAUSTED",
                                            "FAILED_PRECONDITION",
                                            "ABORTED",
                                            "OUT_OF_RANGE",
                                            "UNIMPLEMENTED",
                                            "INTERNAL",
                                            "UNAVAILABLE",
                                            "DATA_LOSS",
                                            "UNAUTHENTICATED"};
    if (code < 0 || code > 16) return "unrecognised gRPC status " + std::to_string(code);
    return names[code];
  }
};

}  // namespace detail

/// The category of gRPC status codes.
inline const std::error_category& grpc_category() noexcept {
  static const detail::grpc_category_impl category;
  return category;
}

inline std::error_code make_error_code(grpc_status status) noexcept {
  return {static_cast<int>(status), grpc_category()};
}

}  // namespace idem

template <>
struct std::is_error_code_enum<idem::grpc_status> : std::true_type {};
// end idem/grpc_status.hpp
// begin idem/key.hpp
// Idempotency keys: the text that names one logical operation across all its attempts.
//
// A key is held inline (no heap), so generating one on every call costs no allocation. Keys are
// at most max_key_length bytes of visible ASCII (RFC 5234 VCHAR, 0x21-0x7E): what survives being
// sent as an HTTP header value, logged, and stored as a database key without quoting surprises.

#include <algorithm>
#include <cstddef>
#include <stdexcept>

namespace idem {

/// The longest key accepted, in bytes (Stripe's limit for idempotency keys is 255 too).
inline constexpr std::size_t max_key_length = 255;

/// True when `key` is non-empty, at most `max_length` bytes, and visible ASCII only.
constexpr bool is_valid_key(std::string_view key,
                            std::size_t max_length = max_key_length) noexcept {
  if (key.empty() || key.size() > max_length) return false;
  return std::all_of(key.begin(), key.end(), [](char c) { return c >= 0x21 && c <= 0x7e; });
}

/// A key's text, stored inline.
class key_buffer {
 public:
  constexpr key_buffer() noexcept = default;
  constexpr key_buffer(const key_buffer& other) noexcept : length_(other.length_) {
    std::copy_n(other.text_, length_, text_);
  }
  constexpr key_buffer& operator=(const key_buffer& other) noexcept {
    if (this != &other) {
      length_ = other.length_;
      std::copy_n(other.text_, length_, text_);
    }
    return *this;
  }

  /// Copies `text`; throws std::invalid_argument unless it is a valid key.
  explicit key_buffer(std::string_view text) {
    if (!is_valid_key(text)) {
      throw std::invalid_argument(
          "idem::key_buffer: a key must be 1 to 255 bytes of visible ASCII (0x21-0x7E)");
    }
    assign_unchecked(text);
  }

  /// For generators that build the text in place: fills `length` bytes through `data()`.
  /// Precondition: length <= max_key_length.
  constexpr char* data() noexcept { return text_; }
  constexpr void set_length(std::size_t length) noexcept {
    length_ = static_cast<unsigned char>(length);
  }

  constexpr std::string_view view() const noexcept { return {text_, length_}; }
  constexpr operator std::string_view() const noexcept { return view(); }
  constexpr std::size_t size() const noexcept { return length_; }
  constexpr bool empty() const noexcept { return length_ == 0; }

  friend constexpr bool operator==(const key_buffer& a, const key_buffer& b) noexcept {
    return a.view() == b.view();
  }

 private:
  constexpr void assign_unchecked(std::string_view text) noexcept {
    std::copy(text.begin(), text.end(), text_);
    length_ = static_cast<unsigned char>(text.size());
  }

  // Only the first length_ bytes are ever read; the rest is left unwritten on purpose, so that
  // making a key does not clear 255 bytes.
  char text_[max_key_length];
  unsigned char length_ = 0;
};

}  // namespace idem
// end idem/key.hpp
// begin idem/policies.hpp
// The policies struct: every choice a retrying wrapper makes, in one place.
//
// Users inherit from default_policies and override only what they change:
//
//   struct my_policies : idem::default_policies {
//     using backoff = idem::decorrelated_jitter;
//     using breaker = idem::consecutive_failure_breaker;
//     static constexpr int max_attempts = 5;
//   };
//
// Each type is checked against its concept where the policies are used, with a message that
// names what is missing.

// begin idem/policy/backoff.hpp
// Backoff: how long to wait before the next attempt.
//
// Retrying at once, or at the same fixed intervals, makes every client that failed together
// retry together, and the retries arrive as a wave that knocks the dependency over again.
// Jitter spreads them. The formulas follow Marc Brooker, "Exponential Backoff And Jitter"
// (AWS Architecture Blog, 2015), where full jitter does the least total work:
//
//   full jitter         random(0, min(cap, base * 2^n))                      (the default)
//   equal jitter        t/2 + random(0, t/2), t = min(cap, base * 2^n)
//   decorrelated jitter min(cap, random(base, previous * 3))
//   exponential_backoff min(cap, base * 2^n)                                  (no jitter)
//   constant_backoff    value
//
// n counts retries from 0: the wait before the second attempt uses n = 0. The defaults, base
// 100 ms and cap 20 s, are those of the AWS SDKs' standard retry mode.

#include <concepts>

// begin idem/policy/random.hpp
// Random sources for the policies that need chance: jittered backoff and key generation.
//
// A retrying object owns 256 bits of seed material. Each logical operation gets its own engine,
// seeded from that material and a counter unique to the operation, so operations on different
// threads never share engine state (no lock, no data race), and a test that fixes the seed sees
// the same delays and keys every run. The material is 256 bits, not one 64-bit word, because
// idempotency keys come from these engines: keys made by different processes must not collide
// even across billions of operations, which a 64-bit seed cannot promise (the birthday bound of
// 2^64 is reached at about 2^32 operations).

#include <array>
#include <bit>
#include <limits>
#include <random>

namespace idem {

/// The seed of one engine: 256 bits.
struct random_seed {
  std::array<std::uint64_t, 4> words{};
};

/// What a `random` policy must be: a standard uniform random bit generator over 64-bit words
/// that can be constructed from an idem::random_seed (idem::xoshiro256ss is; a standard engine
/// needs a small wrapper whose constructor feeds it the four words).
template <class R>
concept RandomSource = std::uniform_random_bit_generator<R> &&
                       std::constructible_from<R, const random_seed&> &&
                       std::same_as<typename R::result_type, std::uint64_t> &&(R::min() == 0) &&
                       (R::max() == std::numeric_limits<std::uint64_t>::max());

namespace detail {

/// SplitMix64 (Steele, Lea, Flood 2014): turns any 64-bit value, even 0 or a counter, into a
/// well-mixed one. Used to expand a seed into engine state and to separate per-operation streams.
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// 64x64->128-bit products for exact bounded random numbers; __extension__ keeps -Wpedantic quiet
// about a type both GCC and Clang have on every 64-bit target.
__extension__ typedef unsigned __int128 uint128;

}  // namespace detail

/// xoshiro256** 1.0 (Blackman and Vigna): small, fast, statistically strong for simulation and
/// jitter. Not cryptographic: keys it generates are unique with overwhelming probability, but
/// guessable by someone who sees many of them. Use a cryptographic source where that matters.
class xoshiro256ss {
 public:
  using result_type = std::uint64_t;

  constexpr explicit xoshiro256ss(std::uint64_t seed) noexcept {
    // The state must not be all zero; SplitMix64 output for four consecutive steps never is.
    for (auto& word : state_)
      word = detail::splitmix64(seed);
  }

  /// Uses the four words as the state; the all-zero state, the one xoshiro cannot leave, is
  /// replaced by the expansion of seed 0.
  constexpr explicit xoshiro256ss(const random_seed& seed) noexcept {
    std::uint64_t any = 0;
    for (std::size_t i = 0; i < 4; ++i)
      any |= (state_[i] = seed.words[i]);
    if (any == 0) *this = xoshiro256ss(std::uint64_t{0});
  }

  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  constexpr result_type operator()() noexcept {
    const std::uint64_t result = std::rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = std::rotl(state_[3], 45);
    return result;
  }

 private:
  std::uint64_t state_[4]{};
};

/// A uniformly distributed integer in [0, bound] (both ends included), exactly uniform:
/// Lemire's multiply-and-reject method (ACM TOMS 2019), one multiplication in the common case.
template <RandomSource R>
constexpr std::uint64_t uniform_up_to(R& rng, std::uint64_t bound) noexcept {
  if (bound == std::numeric_limits<std::uint64_t>::max()) return rng();
  const std::uint64_t range = bound + 1;
  detail::uint128 product = static_cast<detail::uint128>(rng()) * range;
  auto low = static_cast<std::uint64_t>(product);
  if (low < range) {
    const std::uint64_t threshold = (0 - range) % range;
    while (low < threshold) {
      product = static_cast<detail::uint128>(rng()) * range;
      low = static_cast<std::uint64_t>(product);
    }
  }
  return static_cast<std::uint64_t>(product >> 64);
}

/// 256 bits expanded from one 64-bit value, for tests that want to replay.
constexpr random_seed seed_from(std::uint64_t value) noexcept {
  random_seed seed;
  for (auto& word : seed.words)
    word = detail::splitmix64(value);
  return seed;
}

/// 256 bits nobody chose, from std::random_device: what production objects use, so that keys
/// and jitter differ between processes.
inline random_seed nondeterministic_seed() {
  std::random_device device;
  random_seed seed;
  for (auto& word : seed.words)
    word = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  return seed;
}

}  // namespace idem
// end idem/policy/random.hpp

namespace idem {

/// What a `backoff` policy must provide: the delay before retry number `retry_index` (0 for the
/// first retry), given the delay chosen before the previous retry (zero for the first), drawing
/// any chance it needs from `rng`.
template <class B, class R>
concept Backoff = RandomSource<R> &&
    requires(const B& backoff, int retry_index, std::chrono::nanoseconds previous, R& rng) {
  { backoff.delay(retry_index, previous, rng) } -> std::same_as<std::chrono::nanoseconds>;
};

namespace detail {

/// min(cap, base * 2^n) without overflow, for any n >= 0.
constexpr std::chrono::nanoseconds capped_exponential(std::chrono::nanoseconds base,
                                                      std::chrono::nanoseconds cap,
                                                      int n) noexcept {
  if (base <= std::chrono::nanoseconds::zero()) return std::chrono::nanoseconds::zero();
  if (base >= cap) return cap;
  // base >= 1 ns, so from n = 63 on the product exceeds any int64 count, and so any cap.
  if (n >= 63 || base.count() > (cap.count() >> n)) return cap;
  return base * (std::int64_t{1} << n);
}

template <class R>
std::chrono::nanoseconds random_up_to(R& rng, std::chrono::nanoseconds bound) noexcept {
  if (bound <= std::chrono::nanoseconds::zero()) return std::chrono::nanoseconds::zero();
  return std::chrono::nanoseconds{
      static_cast<std::int64_t>(uniform_up_to(rng, static_cast<std::uint64_t>(bound.count())))};
}

}  // namespace detail

/// random(0, min(cap, base * 2^n)): the default.
struct full_jitter {
  std::chrono::nanoseconds base = std::chrono::milliseconds{100};
  std::chrono::nanoseconds cap = std::chrono::seconds{20};

  template <RandomSource R>
  std::chrono::nanoseconds delay(int retry_index, std::chrono::nanoseconds, R& rng) const noexcept {
    return detail::random_up_to(rng, detail::capped_exponential(base, cap, retry_index));
  }
};

/// t/2 + random(0, t/2) with t = min(cap, base * 2^n): never shorter than half the exponential
/// delay, for dependencies that must not see an early retry.
struct equal_jitter {
  std::chrono::nanoseconds base = std::chrono::milliseconds{100};
  std::chrono::nanoseconds cap = std::chrono::seconds{20};

  template <RandomSource R>
  std::chrono::nanoseconds delay(int retry_index, std::chrono::nanoseconds, R& rng) const noexcept {
    const auto t = detail::capped_exponential(base, cap, retry_index);
    const auto half = t / 2;
    return (t - half) + detail::random_up_to(rng, half);
  }
};

/// min(cap, random(base, previous * 3)): grows from the delay actually taken, not the count.
struct decorrelated_jitter {
  std::chrono::nanoseconds base = std::chrono::milliseconds{100};
  std::chrono::nanoseconds cap = std::chrono::seconds{20};

  template <RandomSource R>
  std::chrono::nanoseconds delay(int, std::chrono::nanoseconds previous, R& rng) const noexcept {
    if (base >= cap) return cap;
    const auto last = std::max(previous, base);
    // previous * 3, saturating at cap: beyond it the draw is clipped anyway.
    const auto upper = last > cap / 3 ? cap : last * 3;
    return std::min(cap, base + detail::random_up_to(rng, upper - base));
  }
};

/// min(cap, base * 2^n): no jitter. Predictable, and therefore synchronised across clients.
struct exponential_backoff {
  std::chrono::nanoseconds base = std::chrono::milliseconds{100};
  std::chrono::nanoseconds cap = std::chrono::seconds{20};

  template <RandomSource R>
  std::chrono::nanoseconds delay(int retry_index, std::chrono::nanoseconds, R&) const noexcept {
    return detail::capped_exponential(base, cap, retry_index);
  }
};

/// The same delay every time.
struct constant_backoff {
  std::chrono::nanoseconds value = std::chrono::milliseconds{100};

  template <RandomSource R>
  std::chrono::nanoseconds delay(int, std::chrono::nanoseconds, R&) const noexcept {
    return value;
  }
};

}  // namespace idem
// end idem/policy/backoff.hpp
// begin idem/policy/breaker.hpp
// Circuit breakers: may this call go at all?
//
// A dependency that keeps failing is not helped by more calls, and callers are not helped by
// waiting for timeouts that will come. A breaker counts failures; past a threshold it opens and
// every call fails fast, without reaching the dependency. After `open_for` it half-opens and lets
// a few probe calls through: if they all succeed it closes, if one fails it opens again.
//
// Only what the classifier marks as a fault of the dependency counts as a failure (timeouts,
// connection errors, 5xx); a request the dependency rightly refused (4xx) proves it is alive.
// Times are a clock's `time_since_epoch()`, so the breaker follows whatever clock the policies
// choose, manual_clock in tests included. Copies share state; every member is thread-safe.

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace idem {

enum class breaker_state : std::uint8_t { closed, open, half_open };

/// What a `breaker` policy must provide.
template <class B>
concept Breaker = std::copy_constructible<B> && requires(B& breaker, std::chrono::nanoseconds now) {
  { breaker.allow(now) } -> std::same_as<bool>;  // may a call go now? counts a half-open probe
  breaker.on_success(now);
  breaker.on_failure(now);
  { breaker.state(now) } -> std::same_as<breaker_state>;
};

/// Never opens.
struct no_breaker {
  bool allow(std::chrono::nanoseconds) const noexcept { return true; }
  void on_success(std::chrono::nanoseconds) const noexcept {}
  void on_failure(std::chrono::nanoseconds) const noexcept {}
  breaker_state state(std::chrono::nanoseconds) const noexcept { return breaker_state::closed; }
};

namespace detail {

/// The open / half-open / closed machine both breakers share; they differ only in when a closed
/// breaker trips. The closed state is read with one atomic load, so the hot path takes no lock;
/// transitions are rare and take the mutex.
class breaker_machine {
 public:
  breaker_machine(std::chrono::nanoseconds open_for, int probes)
      : open_for_(open_for), probes_(probes) {
    if (open_for < std::chrono::nanoseconds::zero() || probes < 1) {
      throw std::invalid_argument(
          "idem breaker: open_for must not be negative and at least one probe must be allowed");
    }
  }

  bool closed() const noexcept {
    return mode_.load(std::memory_order_acquire) == breaker_state::closed;
  }

  bool allow(std::chrono::nanoseconds now) {
    if (closed()) return true;
    std::lock_guard lock(mutex_);
    if (mode_.load(std::memory_order_relaxed) == breaker_state::open) {
      if (now - opened_at_ < open_for_) return false;
      mode_.store(breaker_state::half_open, std::memory_order_release);
      admitted_ = 0;
      succeeded_ = 0;
    }
    if (mode_.load(std::memory_order_relaxed) == breaker_state::half_open) {
      if (admitted_ >= probes_) return false;
      ++admitted_;
    }
    return true;
  }

  /// Returns true when this success closed the breaker (the caller resets its counters).
  bool probe_succeeded() {
    std::lock_guard lock(mutex_);
    if (mode_.load(std::memory_order_relaxed) != breaker_state::half_open) return false;
    if (++succeeded_ < probes_) return false;
    mode_.store(breaker_state::closed, std::memory_order_release);
    return true;
  }

  void trip(std::chrono::nanoseconds now) {
    std::lock_guard lock(mutex_);
    opened_at_ = now;
    mode_.store(breaker_state::open, std::memory_order_release);
  }

  /// A failure reported while half-open re-opens; while open it is a late report of a call
  /// admitted before the breaker opened, and changes nothing.
  bool failure_when_not_closed(std::chrono::nanoseconds now) {
    std::lock_guard lock(mutex_);
    const auto mode = mode_.load(std::memory_order_relaxed);
    if (mode == breaker_state::closed) return false;
    if (mode == breaker_state::half_open) {
      opened_at_ = now;
      mode_.store(breaker_state::open, std::memory_order_release);
    }
    return true;
  }

  breaker_state state(std::chrono::nanoseconds now) {
    std::lock_guard lock(mutex_);
    const auto mode = mode_.load(std::memory_order_relaxed);
    if (mode == breaker_state::open && now - opened_at_ >= open_for_)
      return breaker_state::half_open;
    return mode;
  }

 private:
  std::atomic<breaker_state> mode_{breaker_state::closed};
  std::mutex mutex_;
  std::chrono::nanoseconds opened_at_{};
  std::chrono::nanoseconds open_for_;
  int probes_;
  int admitted_ = 0;
  int succeeded_ = 0;
};

}  // namespace detail

/// Opens after `threshold` failures in a row (Polly's "consecutive failures" breaker).
class consecutive_failure_breaker {
 public:
  struct settings {
    int threshold = 5;                                             // failures in a row that open it
    std::chrono::nanoseconds open_for = std::chrono::seconds{30};  // before the first probe
    int probes = 1;  // successes in a row that close it
  };

  consecutive_failure_breaker() : consecutive_failure_breaker(settings{}) {}
  explicit consecutive_failure_breaker(settings s) : state_(std::make_shared<shared>(s)) {
    if (s.threshold < 1) {
      throw std::invalid_argument(
          "idem::consecutive_failure_breaker: threshold must be at least 1");
    }
  }

  bool allow(std::chrono::nanoseconds now) { return state_->machine.allow(now); }

  void on_success(std::chrono::nanoseconds) {
    auto& s = *state_;
    if (s.machine.closed()) {
      // Load before store: a healthy dependency then never writes the shared line.
      if (s.failures.load(std::memory_order_relaxed) != 0) {
        s.failures.store(0, std::memory_order_relaxed);
      }
      return;
    }
    if (s.machine.probe_succeeded()) s.failures.store(0, std::memory_order_relaxed);
  }

  void on_failure(std::chrono::nanoseconds now) {
    auto& s = *state_;
    if (s.machine.failure_when_not_closed(now)) return;
    if (s.failures.fetch_add(1, std::memory_order_relaxed) + 1 >= s.threshold) {
      s.failures.store(0, std::memory_order_relaxed);
      s.machine.trip(now);
    }
  }

  breaker_state state(std::chrono::nanoseconds now) { return state_->machine.state(now); }

 private:
  struct shared {
    explicit shared(const settings& s) : machine(s.open_for, s.probes), threshold(s.threshold) {}
    detail::breaker_machine machine;
    int threshold;
    std::atomic<int> failures{0};
  };
  std::shared_ptr<shared> state_;
};

/// Opens when at least `threshold_percent` of the last `window` calls failed, once at least
/// `minimum_calls` have been seen (resilience4j's count-based sliding window; its defaults).
/// Every call, successes included, claims a slot of the shared window with one atomic add: on
/// many cores calling one dependency that line is contended, where the consecutive-failure
/// breaker only reads on success.
class failure_rate_breaker {
 public:
  struct settings {
    int window = 100;            // calls remembered
    int minimum_calls = 100;     // calls before the rate is trusted
    int threshold_percent = 50;  // failure rate that opens it
    std::chrono::nanoseconds open_for = std::chrono::seconds{60};
    int probes = 10;  // successes in a row that close it
  };

  failure_rate_breaker() : failure_rate_breaker(settings{}) {}
  explicit failure_rate_breaker(settings s) : state_(std::make_shared<shared>(s)) {
    if (s.window < 1 || s.minimum_calls < 1 || s.minimum_calls > s.window ||
        s.threshold_percent < 1 || s.threshold_percent > 100) {
      throw std::invalid_argument(
          "idem::failure_rate_breaker: window and minimum_calls must be positive with "
          "minimum_calls <= window, and threshold_percent within 1..100");
    }
  }

  bool allow(std::chrono::nanoseconds now) { return state_->machine.allow(now); }

  void on_success(std::chrono::nanoseconds) {
    auto& s = *state_;
    if (s.machine.closed()) {
      s.record(false);
      return;
    }
    if (s.machine.probe_succeeded()) s.reset();
  }

  void on_failure(std::chrono::nanoseconds now) {
    auto& s = *state_;
    if (s.machine.failure_when_not_closed(now)) return;
    s.record(true);
    const auto calls = std::min<std::int64_t>(s.recorded.load(std::memory_order_relaxed), s.window);
    if (calls >= s.minimum_calls && s.failures() * 100 >= s.threshold_percent * calls) {
      s.machine.trip(now);
      s.reset();
    }
  }

  breaker_state state(std::chrono::nanoseconds now) { return state_->machine.state(now); }

 private:
  struct shared {
    explicit shared(const settings& s)
        : machine(s.open_for, s.probes),
          window(s.window),
          minimum_calls(s.minimum_calls),
          threshold_percent(s.threshold_percent),
          bits(static_cast<std::size_t>((s.window + 63) / 64)) {}

    // The last `window` outcomes as a ring of bits (1: failed), lock-free: each call claims a
    // slot with one fetch_add and sets or clears its bit. The failure count is read from the
    // ring itself when a failure asks whether to trip, so no separate counter can drift from it.
    void record(bool failed) {
      const auto slot =
          static_cast<std::uint64_t>(recorded.fetch_add(1, std::memory_order_relaxed) % window);
      auto& word = bits[slot / 64];
      const std::uint64_t bit = std::uint64_t{1} << (slot % 64);
      // Load first: a healthy dependency overwrites 0 with 0, and then need not write at all.
      const bool was_failed = (word.load(std::memory_order_relaxed) & bit) != 0;
      if (failed && !was_failed) word.fetch_or(bit, std::memory_order_relaxed);
      if (!failed && was_failed) word.fetch_and(~bit, std::memory_order_relaxed);
    }
    std::int64_t failures() const {
      std::int64_t count = 0;
      for (const auto& word : bits)
        count += std::popcount(word.load(std::memory_order_relaxed));
      return count;
    }
    void reset() {
      for (auto& word : bits)
        word.store(0, std::memory_order_relaxed);
      recorded.store(0, std::memory_order_relaxed);
    }

    detail::breaker_machine machine;
    std::int64_t window, minimum_calls, threshold_percent;
    std::vector<std::atomic<std::uint64_t>> bits;
    std::atomic<std::int64_t> recorded{0};
  };
  std::shared_ptr<shared> state_;
};

}  // namespace idem
// end idem/policy/breaker.hpp
// begin idem/policy/budget.hpp
// Retry budgets: may this retry go at all?
//
// When a dependency is down, every caller retrying multiplies the load exactly when it can least
// take it. A budget caps retries at a share of the traffic, so an outage costs at most that much
// extra. token_bucket follows the AWS SDKs' retry quota (a bucket of 500 tokens; a retry takes 5,
// a retry after a timeout 10; a success gives back) and adds the refill of gRPC's retry
// throttling and Finagle's RetryBudget: every first attempt deposits `retry_ratio` of a retry's
// cost. Under total failure the bucket drains and then retries settle at `retry_ratio` of first
// attempts (half that when every failure is a timeout, as those cost double).

#include <cmath>

namespace idem {

/// Why a retry is wanted, which sets its price: in the AWS SDKs a retry after a timeout costs
/// twice as much, since a dependency that times out is likelier overloaded.
enum class retry_reason : std::uint8_t {
  none,       // no retry: with on_success, the first attempt succeeded
  transient,  // the failure did not take effect
  ambiguous,  // it may have (a timeout, a connection lost after sending)
};

/// What a `budget` policy must provide. Copies of a budget share its state, so one budget can
/// guard every call to one dependency; all members must be safe to call from many threads.
template <class B>
concept Budget = std::copy_constructible<B> && requires(B& budget, retry_reason reason) {
  budget.on_request();                                         // a first attempt is about to go
  { budget.try_acquire_retry(reason) } -> std::same_as<bool>;  // may a retry go for this reason?
  budget.on_success(reason);  // an operation succeeded; `reason`: that of the retry that did it
};

/// Never refuses a retry. Only for dependencies that cannot be overloaded by their callers.
struct unlimited_budget {
  void on_request() const noexcept {}
  bool try_acquire_retry(retry_reason) const noexcept { return true; }
  void on_success(retry_reason) const noexcept {}
};

/// A token bucket shared by its copies. Tokens are kept in thousandths so that fractional
/// deposits (0.1 x 5 = 0.5 token) add up exactly.
class token_bucket {
 public:
  struct settings {
    double max_tokens = 500;           // AWS SDK INITIAL_RETRY_TOKENS; also the bucket's size
    double retry_cost = 5;             // AWS SDK RETRY_COST
    double ambiguous_retry_cost = 10;  // AWS SDK TIMEOUT_RETRY_COST
    double success_deposit = 1;        // AWS SDK NO_RETRY_INCREMENT: a first-attempt success
    double retry_ratio = 0.1;          // gRPC retry throttling's example tokenRatio
  };

  token_bucket() : token_bucket(settings{}) {}
  explicit token_bucket(settings s) : state_(std::make_shared<state>(validated(s))) {}

  void on_request() noexcept { deposit(state_->request_deposit); }

  bool try_acquire_retry(retry_reason reason) noexcept {
    const std::int64_t cost = cost_of(reason);
    auto& tokens = state_->tokens;
    std::int64_t current = tokens.load(std::memory_order_relaxed);
    do {
      if (current < cost) return false;
    } while (!tokens.compare_exchange_weak(current, current - cost, std::memory_order_relaxed));
    return true;
  }

  void on_success(retry_reason reason) noexcept {
    // A retry that worked gives back what it took (AWS SDK): it was worth spending.
    deposit(reason == retry_reason::none ? state_->success_deposit : cost_of(reason));
  }

  /// Tokens left, for tests and dashboards.
  double tokens() const noexcept {
    return static_cast<double>(state_->tokens.load(std::memory_order_relaxed)) / scale;
  }

 private:
  static constexpr double scale = 1000;

  struct state {
    explicit state(const settings& s)
        : capacity(milli(s.max_tokens)),
          cost(milli(s.retry_cost)),
          ambiguous_cost(milli(s.ambiguous_retry_cost)),
          success_deposit(milli(s.success_deposit)),
          request_deposit(milli(s.retry_ratio * s.retry_cost)),
          tokens(capacity) {}
    std::int64_t capacity, cost, ambiguous_cost, success_deposit, request_deposit;
    std::atomic<std::int64_t> tokens;
  };

  static std::int64_t milli(double tokens) { return std::llround(tokens * scale); }

  std::int64_t cost_of(retry_reason reason) const noexcept {
    return reason == retry_reason::ambiguous ? state_->ambiguous_cost : state_->cost;
  }

  static const settings& validated(const settings& s) {
    const bool finite = std::isfinite(s.max_tokens) && std::isfinite(s.retry_cost) &&
                        std::isfinite(s.ambiguous_retry_cost) && std::isfinite(s.success_deposit) &&
                        std::isfinite(s.retry_ratio);
    if (!finite || s.max_tokens < 0 || s.max_tokens > 1e12 || s.retry_cost < 1 / scale ||
        s.ambiguous_retry_cost < 1 / scale || s.retry_cost > s.max_tokens + 1 ||
        s.success_deposit < 0 || s.retry_ratio < 0 || s.retry_ratio > 1e6) {
      throw std::invalid_argument(
          "idem::token_bucket: tokens and costs must be finite, costs at least 0.001 token "
          "(the bucket counts thousandths), and the deposits and ratio non-negative");
    }
    return s;
  }

  void deposit(std::int64_t amount) noexcept {
    auto& tokens = state_->tokens;
    const std::int64_t capacity = state_->capacity;
    std::int64_t current = tokens.load(std::memory_order_relaxed);
    // The common case, a healthy dependency, keeps the bucket full: then this is one load and
    // no write, so callers on many cores do not fight over the cache line.
    while (current < capacity) {
      if (tokens.compare_exchange_weak(current, std::min(capacity, current + amount),
                                       std::memory_order_relaxed)) {
        return;
      }
    }
  }

  std::shared_ptr<state> state_;
};

}  // namespace idem
// end idem/policy/budget.hpp
// begin idem/policy/classifier.hpp
// Classifiers: was that a success, a failure worth repeating, or one that repeating cannot fix?
//
// The rules are those of the HTTP and gRPC specifications and of the AWS and Google SDKs:
//
//   HTTP  408 Request Timeout, 425 Too Early, 429 Too Many Requests, 502, 503   transient
//         504 Gateway Timeout                                                   ambiguous
//         other 4xx: the request itself is wrong; never repeated                permanent
//         500 and other 5xx: may be a bug that repeats; not repeated by default permanent
//   errno timed_out, connection_reset / _aborted, broken_pipe, network_reset     ambiguous
//         connection_refused, host / network unreachable, network_down, EAGAIN  transient
//   gRPC  UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED                              transient
//         DEADLINE_EXCEEDED                                                     ambiguous
//
// "Ambiguous" means the request may have taken effect: the connection died after it was sent.
// Repeating it is safe only under the same idempotency key, or after asking the dependency
// whether it landed (the call's `resolve` hook).

#include <exception>
#include <optional>
#include <type_traits>

namespace idem {

/// What a `classifier` policy must provide for a call returning `Result`: a judgement of a
/// returned value, and of a thrown exception. (A call returning void is judged by its
/// exceptions alone.)
template <class C, class Result>
concept Classifier = requires(const C& classifier, std::exception_ptr error) {
  { classifier.classify_exception(error) } -> std::same_as<classification>;
}
&&(std::is_void_v<Result> || requires(const C& classifier, const Result& result) {
  { classifier.classify(result) } -> std::same_as<classification>;
});

/// The HTTP rules above, for a status code.
constexpr classification classify_http_status(int status) noexcept {
  const bool server_error = status >= 500 && status <= 599;
  if (status >= 100 && status <= 399) return {disposition::success, status, false, {}};
  switch (status) {
    case 408:  // the server timed out waiting for the request: it did not act on it
    case 429:  // rate limited: the dependency asks for less load
      return {disposition::transient, status, true, {}};
    case 425:  // Too Early (RFC 8470): replay of early data refused; resend normally
      return {disposition::transient, status, false, {}};
    case 502:
    case 503:
      return {disposition::transient, status, true, {}};
    case 504:  // the gateway gave up waiting; the upstream may still have done it
      return {disposition::ambiguous, status, true, {}};
    default:
      return {disposition::permanent, status, server_error, {}};
  }
}

/// The errno and gRPC rules above, for an error code. An empty code is a success; a code from
/// a category these rules do not know is permanent.
inline classification classify_error_code(const std::error_code& code) noexcept {
  if (!code) return {disposition::success, 0, false, {}};
  const int value = code.value();
  if (code.category() == grpc_category()) {
    switch (static_cast<grpc_status>(value)) {
      case grpc_status::unavailable:
      case grpc_status::resource_exhausted:
      case grpc_status::aborted:
        return {disposition::transient, value, true, {}};
      case grpc_status::deadline_exceeded:
        return {disposition::ambiguous, value, true, {}};
      case grpc_status::internal:
      case grpc_status::unknown:
      case grpc_status::data_loss:
        return {disposition::permanent, value, true, {}};
      default:
        return {disposition::permanent, value, false, {}};
    }
  }
  const auto condition = code.default_error_condition();
  if (condition.category() == std::generic_category()) {
    switch (static_cast<std::errc>(condition.value())) {
      case std::errc::timed_out:
      case std::errc::connection_reset:
      case std::errc::connection_aborted:
      case std::errc::broken_pipe:
      case std::errc::network_reset:
        return {disposition::ambiguous, value, true, {}};
      case std::errc::connection_refused:
      case std::errc::host_unreachable:
      case std::errc::network_unreachable:
      case std::errc::network_down:
      case std::errc::resource_unavailable_try_again:
        return {disposition::transient, value, true, {}};
      default:
        break;
    }
  }
  return {disposition::permanent, value, false, {}};
}

namespace detail {

template <class R>
concept has_status_member = requires(const R& r) {
  { r.status } -> std::convertible_to<int>;
};

template <class R>
concept has_status_function = requires(const R& r) {
  { r.status() } -> std::convertible_to<int>;
};

template <class R>
concept has_retry_after_member = requires(const R& r) {
  { r.retry_after } -> std::convertible_to<std::string_view>;
};

template <class R>
concept has_header_lookup = requires(const R& r) {
  { r.header(std::string_view{}) } -> std::convertible_to<std::optional<std::string_view>>;
};

template <class R>
constexpr int status_of(const R& response) {
  if constexpr (has_status_member<R>) {
    return static_cast<int>(response.status);
  } else {
    return static_cast<int>(response.status());
  }
}

template <class R>
constexpr std::string_view retry_after_of(const R& response) {
  if constexpr (has_retry_after_member<R>) {
    return std::string_view{response.retry_after};
  } else if constexpr (has_header_lookup<R>) {
    const std::optional<std::string_view> value = response.header("Retry-After");
    return value ? *value : std::string_view{};
  } else {
    return {};
  }
}

// std::error_code itself, an error code enum (grpc_status), or std::errc, the portable errno
// names, which the standard makes an error *condition* enum.
template <class E>
concept error_code_like =
    std::same_as<E, std::error_code> || std::is_error_code_enum_v<E> || std::same_as<E, std::errc>;

template <error_code_like E>
std::error_code to_error_code(const E& code) noexcept {
  if constexpr (std::same_as<E, std::errc>) {
    return std::make_error_code(code);
  } else {
    return std::error_code{code};
  }
}

/// The exceptions every provided classifier understands: std::system_error by its code.
inline classification classify_standard_exception(const std::exception_ptr& error) noexcept {
  try {
    std::rethrow_exception(error);
  } catch (const std::system_error& e) {
    return classify_error_code(e.code());
  } catch (...) {
  }
  return {disposition::permanent, 0, false, {}};
}

template <class... Types>
bool holds_one_of(const std::exception_ptr& error) noexcept {
  if constexpr (sizeof...(Types) == 0) {
    return false;
  } else {
    return ([&error]<class T>() -> bool {
      try {
        std::rethrow_exception(error);
      } catch (const T&) {
        return true;
      } catch (...) {
      }
      return false;
    }.template operator()<Types>() || ...);
  }
}

}  // namespace detail

/// A response type with an HTTP status: a `status` member or `status()` function, and optionally
/// a `retry_after` string member or a `header(name)` lookup returning optional<string_view>.
/// Such a lookup is asked for "Retry-After" and must compare names without regard to case, as
/// HTTP does (HTTP/2 and 3 send them in lower case).
template <class R>
concept http_response_like = detail::has_status_member<R> || detail::has_status_function<R>;

/// HTTP responses by the HTTP rules, with their Retry-After.
struct http_classifier {
  template <http_response_like R>
  classification classify(const R& response) const {
    auto verdict = classify_http_status(detail::status_of(response));
    if (verdict.kind != disposition::success)
      verdict.retry_after = detail::retry_after_of(response);
    return verdict;
  }
  classification classify_exception(const std::exception_ptr& error) const noexcept {
    return detail::classify_standard_exception(error);
  }
};

/// std::error_code results (and std::errc, and error code enums such as grpc_status) by the errno
/// and gRPC rules.
struct error_code_classifier {
  template <detail::error_code_like E>
  classification classify(const E& code) const noexcept {
    return classify_error_code(detail::to_error_code(code));
  }
  classification classify_exception(const std::exception_ptr& error) const noexcept {
    return detail::classify_standard_exception(error);
  }
};

/// A list of exception types, for exception_classifier.
template <class... Types>
struct exception_types {};

/// Exceptions by type: those in `Transient` (or derived from one) are repeated, those in
/// `Ambiguous` are repeated as ambiguous, std::system_error by its code, others are permanent.
/// Returned values are successes.
template <class Transient, class Ambiguous = exception_types<>>
struct exception_classifier;

template <class... Transient, class... Ambiguous>
struct exception_classifier<exception_types<Transient...>, exception_types<Ambiguous...>> {
  template <class R>
  classification classify(const R&) const noexcept {
    return {disposition::success, 0, false, {}};
  }
  classification classify_exception(const std::exception_ptr& error) const noexcept {
    if (detail::holds_one_of<Ambiguous...>(error)) return {disposition::ambiguous, 0, true, {}};
    if (detail::holds_one_of<Transient...>(error)) return {disposition::transient, 0, true, {}};
    return detail::classify_standard_exception(error);
  }
};

/// The default: HTTP-like responses by the HTTP rules, error codes by the errno and gRPC rules,
/// std::system_error by its code; any other value is a success and any other exception permanent.
struct default_classifier {
  template <class R>
  classification classify(const R& result) const {
    if constexpr (http_response_like<R>) {
      return http_classifier{}.classify(result);
    } else if constexpr (detail::error_code_like<R>) {
      return classify_error_code(detail::to_error_code(result));
    } else {
      return {disposition::success, 0, false, {}};
    }
  }
  classification classify_exception(const std::exception_ptr& error) const noexcept {
    return detail::classify_standard_exception(error);
  }
};

/// The user's own rules: `function(result)` judges values and, when it also accepts a
/// std::exception_ptr, exceptions (others are judged as default_classifier would).
template <class Function>
struct classify_with {
  Function function{};

  template <class R>
  requires std::is_invocable_r_v<classification, const Function&, const R&> classification
  classify(const R& result)
  const { return function(result); }
  classification classify_exception(const std::exception_ptr& error) const {
    if constexpr (std::is_invocable_r_v<classification, const Function&,
                                        const std::exception_ptr&>) {
      return function(error);
    } else {
      return detail::classify_standard_exception(error);
    }
  }
};

}  // namespace idem
// end idem/policy/classifier.hpp
// begin idem/policy/clock.hpp
// Clocks: where the retry loop reads the time and how it waits.
//
// A clock gives two readings: `now()`, monotonic, for deadlines and delays (it never jumps when
// an operator or NTP sets the wall time), and `wall_now()`, for the one thing that needs the
// calendar: an HTTP-date in Retry-After. `sleep_for` is how the loop waits between attempts;
// manual_clock turns that wait into an instant jump of its own time, so tests of minutes of
// backoff run in microseconds and can assert the exact delays.

#include <thread>

namespace idem {

/// What a `clock` policy must provide.
template <class C>
concept Clock = requires(C& clock, std::chrono::nanoseconds delay) {
  typename C::time_point;
  { clock.now() } -> std::same_as<typename C::time_point>;
  { clock.now() - clock.now() } -> std::convertible_to<std::chrono::nanoseconds>;
  { clock.wall_now() } -> std::same_as<std::chrono::system_clock::time_point>;
  clock.sleep_for(delay);
};

/// The default: std::chrono::steady_clock for deadlines, the system clock for HTTP-dates, and a
/// real sleep.
struct steady_clock {
  using time_point = std::chrono::steady_clock::time_point;
  time_point now() const noexcept { return std::chrono::steady_clock::now(); }
  std::chrono::system_clock::time_point wall_now() const noexcept {
    return std::chrono::system_clock::now();
  }
  void sleep_for(std::chrono::nanoseconds delay) const { std::this_thread::sleep_for(delay); }
};

/// The system (wall) clock for everything. Deadlines then move when the wall time is set;
/// prefer steady_clock unless the deadline itself comes from a wall-clock timestamp.
struct system_clock {
  using time_point = std::chrono::system_clock::time_point;
  time_point now() const noexcept { return std::chrono::system_clock::now(); }
  std::chrono::system_clock::time_point wall_now() const noexcept { return now(); }
  void sleep_for(std::chrono::nanoseconds delay) const { std::this_thread::sleep_for(delay); }
};

/// A clock that moves only when told to: `advance(d)` or a `sleep_for(d)`, which returns at once.
/// Copies share one timeline, so a test hands one copy to the retrying object and keeps another
/// to read or move the time (a slow attempt is simulated by advancing inside the call).
/// Thread-safe: the time is one atomic counter.
class manual_clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Starts at steady time zero, and at the given wall time (by default 2026-01-01T00:00:00Z,
  /// fixed so that HTTP-date tests are reproducible).
  explicit manual_clock(std::chrono::system_clock::time_point wall_start =
                            std::chrono::system_clock::time_point{std::chrono::seconds{1767225600}})
      : state_(std::make_shared<state>(wall_start)) {}

  time_point now() const noexcept { return time_point{elapsed()}; }
  std::chrono::system_clock::time_point wall_now() const noexcept {
    return state_->wall_start +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(elapsed());
  }
  void sleep_for(std::chrono::nanoseconds delay) noexcept {
    if (delay > std::chrono::nanoseconds::zero()) {
      state_->slept.fetch_add(delay.count(), std::memory_order_relaxed);
      state_->sleeps.fetch_add(1, std::memory_order_relaxed);
      advance(delay);
    }
  }
  /// Moves the time forward without counting it as a sleep.
  void advance(std::chrono::nanoseconds delay) noexcept {
    state_->elapsed.fetch_add(delay.count(), std::memory_order_relaxed);
  }

  /// Time since the clock started.
  std::chrono::nanoseconds elapsed() const noexcept {
    return std::chrono::nanoseconds{state_->elapsed.load(std::memory_order_relaxed)};
  }
  /// Total time spent in sleep_for, and how many sleeps there were.
  std::chrono::nanoseconds slept() const noexcept {
    return std::chrono::nanoseconds{state_->slept.load(std::memory_order_relaxed)};
  }
  long long sleeps() const noexcept { return state_->sleeps.load(std::memory_order_relaxed); }

 private:
  struct state {
    explicit state(std::chrono::system_clock::time_point start) : wall_start(start) {}
    std::chrono::system_clock::time_point wall_start;
    std::atomic<std::chrono::nanoseconds::rep> elapsed{0};
    std::atomic<std::chrono::nanoseconds::rep> slept{0};
    std::atomic<long long> sleeps{0};
  };
  std::shared_ptr<state> state_;
};

}  // namespace idem
// end idem/policy/clock.hpp
// begin idem/policy/key_generator.hpp
// Key generators: where a logical operation's idempotency key comes from.
//
// retrying calls its generator once per operation, before the first attempt, and hands the same
// key to every attempt; so a retry can never be sent under a new key. UUIDs are the usual choice
// (RFC 9562): version 4 is 122 random bits; version 7 puts the Unix time in milliseconds first, so
// keys sort by creation time and index well in B-tree stores.

#include <cstring>

namespace idem {

/// What a `key_generator` policy must provide: a fresh key from the operation's random source
/// and the clock.
template <class G, class R, class C>
concept KeyGenerator = RandomSource<R> && Clock<C> &&
    requires(const G& generator, R& rng, C& clock) {
  { generator.generate(rng, clock) } -> std::same_as<key_buffer>;
};

namespace detail {

/// Eight lowercase hex digits of `value`, most significant first, written as one 64-bit word:
/// each nibble is spread into its own byte, then turned into '0'-'9' or 'a'-'f' all at once.
inline std::uint64_t hex_digits(std::uint32_t value) noexcept {
  std::uint64_t v = value;
  v = (v | (v << 16)) & 0x0000ffff0000ffffULL;
  v = (v | (v << 8)) & 0x00ff00ff00ff00ffULL;
  v = (v | (v << 4)) & 0x0f0f0f0f0f0f0f0fULL;
  // The highest nibble is now in the highest byte; on a little-endian machine memory starts at
  // the lowest, so reverse the bytes (compilers turn this into one bswap).
  if constexpr (std::endian::native == std::endian::little) {
    v = ((v & 0x00000000ffffffffULL) << 32) | (v >> 32);
    v = ((v & 0x0000ffff0000ffffULL) << 16) | ((v >> 16) & 0x0000ffff0000ffffULL);
    v = ((v & 0x00ff00ff00ff00ffULL) << 8) | ((v >> 8) & 0x00ff00ff00ff00ffULL);
  }
  // A byte holding 10..15 gets 'a' - '0' - 10 = 39 more than one holding 0..9.
  const std::uint64_t letters = ((v + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL;
  return v + 0x3030303030303030ULL + letters * 39;
}

/// Writes 16 bytes as the 36-character 8-4-4-4-12 lowercase hex form of RFC 9562.
inline key_buffer format_uuid(std::uint64_t high, std::uint64_t low) noexcept {
  char digits[32];
  const std::uint32_t parts[4] = {
      static_cast<std::uint32_t>(high >> 32), static_cast<std::uint32_t>(high),
      static_cast<std::uint32_t>(low >> 32), static_cast<std::uint32_t>(low)};
  for (std::size_t i = 0; i < 4; ++i) {
    const std::uint64_t word = hex_digits(parts[i]);
    std::memcpy(digits + 8 * i, &word, 8);
  }
  key_buffer key;
  char* out = key.data();
  std::memcpy(out, digits, 8);
  out[8] = '-';
  std::memcpy(out + 9, digits + 8, 4);
  out[13] = '-';
  std::memcpy(out + 14, digits + 12, 4);
  out[18] = '-';
  std::memcpy(out + 19, digits + 16, 4);
  out[23] = '-';
  std::memcpy(out + 24, digits + 20, 12);
  key.set_length(36);
  return key;
}

// The variant field (RFC 9562 section 4.1): the two top bits of octet 8 are 1 0.
inline constexpr std::uint64_t variant_mask = 0x3fffffffffffffffULL;
inline constexpr std::uint64_t variant_bits = 0x8000000000000000ULL;

}  // namespace detail

/// UUID version 4: 122 random bits (RFC 9562 section 5.4). The default.
struct uuid_v4 {
  template <RandomSource R, Clock C>
  key_buffer generate(R& rng, C&) const noexcept {
    const std::uint64_t high = (rng() & ~std::uint64_t{0xf000}) | 0x4000;  // version 4
    const std::uint64_t low = (rng() & detail::variant_mask) | detail::variant_bits;
    return detail::format_uuid(high, low);
  }
};

/// UUID version 7: 48 bits of Unix time in milliseconds, then 74 random bits (RFC 9562 section
/// 5.7). Keys from one process sort by creation time to the millisecond; within one millisecond
/// they are random, not counted (the RFC's optional monotonic counter is left out: the keys only
/// need to be unique).
struct uuid_v7 {
  template <RandomSource R, Clock C>
  key_buffer generate(R& rng, C& clock) const {
    const auto millis =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock.wall_now().time_since_epoch())
            .count();
    const std::uint64_t unix_ms = static_cast<std::uint64_t>(millis) & 0xffffffffffffULL;
    const std::uint64_t high = (unix_ms << 16) | 0x7000 | (rng() & 0x0fff);  // version 7
    const std::uint64_t low = (rng() & detail::variant_mask) | detail::variant_bits;
    return detail::format_uuid(high, low);
  }
};

}  // namespace idem
// end idem/policy/key_generator.hpp
// begin idem/policy/observer.hpp
// Observers: telemetry for every attempt, every wait and every end of a retried operation.
//
// The default, no_observer, has empty inline members: the calls vanish when inlined, so a
// configuration that watches nothing pays nothing. counting_observer keeps totals in atomics
// (copies share them); callback_observer forwards to user functions.

#include <functional>

namespace idem {

/// How a retried operation ended.
enum class retry_verdict : std::uint8_t {
  succeeded,           // an attempt succeeded
  resolved,            // an ambiguous attempt had taken effect after all: the resolve hook said so
  permanent_failure,   // an attempt failed in a way repeating cannot fix
  attempts_exhausted,  // the attempt cap was reached
  deadline_exceeded,   // the next attempt could not start before the deadline
  budget_exhausted,    // the retry budget refused the next retry
  circuit_open,        // the circuit breaker refused the call
  not_retried,         // a transient failure that this call may not repeat: unkeyed and not
                       // idempotent, or a nested layer (the outer layer retries)
};

constexpr std::string_view to_string(retry_verdict v) noexcept {
  switch (v) {
    case retry_verdict::succeeded:
      return "succeeded";
    case retry_verdict::resolved:
      return "resolved";
    case retry_verdict::permanent_failure:
      return "permanent_failure";
    case retry_verdict::attempts_exhausted:
      return "attempts_exhausted";
    case retry_verdict::deadline_exceeded:
      return "deadline_exceeded";
    case retry_verdict::budget_exhausted:
      return "budget_exhausted";
    case retry_verdict::circuit_open:
      return "circuit_open";
    case retry_verdict::not_retried:
      return "not_retried";
  }
  return "unknown";
}

/// An attempt has ended.
struct attempt_event {
  std::string_view key;
  const attempt_record& record;
};

/// The loop is about to wait before attempt `next_attempt`.
struct delay_event {
  std::string_view key;
  int next_attempt;
  std::chrono::nanoseconds delay;
  bool from_retry_after;
};

/// The operation has ended.
struct finish_event {
  std::string_view key;
  retry_verdict verdict;
  int attempts;
  std::chrono::nanoseconds elapsed;
};

/// What an `observer` policy must provide.
template <class O>
concept Observer = std::copy_constructible<O> &&
    requires(O& observer, const attempt_event& a, const delay_event& d, const finish_event& f) {
  observer.on_attempt(a);
  observer.on_delay(d);
  observer.on_finish(f);
};

/// Watches nothing, costs nothing.
struct no_observer {
  constexpr void on_attempt(const attempt_event&) const noexcept {}
  constexpr void on_delay(const delay_event&) const noexcept {}
  constexpr void on_finish(const finish_event&) const noexcept {}
};

/// Totals, shared by copies, safe from many threads.
class counting_observer {
 public:
  counting_observer() : counts_(std::make_shared<counters>()) {}

  void on_attempt(const attempt_event&) noexcept { add(counts_->attempts); }
  void on_delay(const delay_event& e) noexcept {
    add(counts_->retries);
    counts_->delay_ns.fetch_add(e.delay.count(), std::memory_order_relaxed);
  }
  void on_finish(const finish_event& e) noexcept {
    add(counts_->operations);
    add(e.verdict == retry_verdict::succeeded || e.verdict == retry_verdict::resolved
            ? counts_->successes
            : counts_->give_ups);
  }

  long long attempts() const noexcept { return get(counts_->attempts); }
  long long retries() const noexcept { return get(counts_->retries); }
  long long operations() const noexcept { return get(counts_->operations); }
  long long successes() const noexcept { return get(counts_->successes); }
  long long give_ups() const noexcept { return get(counts_->give_ups); }
  std::chrono::nanoseconds total_delay() const noexcept {
    return std::chrono::nanoseconds{counts_->delay_ns.load(std::memory_order_relaxed)};
  }

 private:
  struct counters {
    std::atomic<long long> attempts{0}, retries{0}, operations{0}, successes{0}, give_ups{0};
    std::atomic<std::chrono::nanoseconds::rep> delay_ns{0};
  };
  static void add(std::atomic<long long>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }
  static long long get(const std::atomic<long long>& c) noexcept {
    return c.load(std::memory_order_relaxed);
  }
  std::shared_ptr<counters> counts_;
};

/// Forwards each event to a user function; an unset function is skipped.
struct callback_observer {
  std::function<void(const attempt_event&)> attempt;
  std::function<void(const delay_event&)> delay;
  std::function<void(const finish_event&)> finish;

  void on_attempt(const attempt_event& e) const {
    if (attempt) attempt(e);
  }
  void on_delay(const delay_event& e) const {
    if (delay) delay(e);
  }
  void on_finish(const finish_event& e) const {
    if (finish) finish(e);
  }
};

}  // namespace idem
// end idem/policy/observer.hpp

namespace idem {

/// Whether a call may be repeated, and why.
enum class call_safety {
  /// The call sends the idempotency key and the server deduplicates by it: repeating is safe,
  /// even after an ambiguous failure. The default.
  keyed,
  /// The call is idempotent by nature (a GET, a PUT of a whole resource): repeating is safe.
  idempotent,
  /// Neither: a repeat might do the effect twice. Never retried.
  unsafe,
};

struct default_policies {
  /// Reads the time and waits: steady_clock (monotonic), or manual_clock in tests.
  using clock = idem::steady_clock;
  /// The random engine each operation draws its jitter and key from.
  using random = idem::xoshiro256ss;
  /// The wait before each retry: full jitter, base 100 ms, cap 20 s (AWS SDK standard mode).
  using backoff = idem::full_jitter;
  /// Caps retries at a share of traffic: a 500-token bucket, a retry costs 5 (AWS SDK retry
  /// quota), refilled by 10% of a retry per first attempt (gRPC retry throttling's ratio).
  using budget = idem::token_bucket;
  /// No circuit breaker by default: whether to fail fast is the service's decision.
  using breaker = idem::no_breaker;
  /// HTTP-like responses, error codes, gRPC codes and std::system_error, by their specs' rules.
  using classifier = idem::default_classifier;
  /// Telemetry: none, at no cost.
  using observer = idem::no_observer;
  /// The idempotency key of each operation: a random UUID (version 4).
  using key_generator = idem::uuid_v4;

  /// Attempts per operation, the first included (the AWS SDKs' standard mode default).
  static constexpr int max_attempts = 3;
  /// The overall time one operation may take, attempts and waits together. There is no
  /// standard value; 10 s is a common request timeout. Set it from your caller's own deadline.
  static constexpr std::chrono::milliseconds deadline{10'000};
  /// Calls are keyed: the key goes with every attempt and the server deduplicates.
  static constexpr call_safety safety = call_safety::keyed;
  /// A retrying call made inside another one on the same thread makes one attempt only, so that
  /// retries happen at one layer (three layers of three attempts would be 27 calls).
  static constexpr bool retry_when_nested = false;
};

}  // namespace idem
// end idem/policies.hpp
// begin idem/retry_after.hpp
// idem — exactly-once effect under at-least-once delivery.
//
// Parsing of the HTTP `Retry-After` field (RFC 9110 §10.2.3) and of HTTP-date (RFC 9110 §5.6.7),
// so that a retrying client waits as long as the server asked instead of its own backoff.
// Field values come from the network: every function here is noexcept, allocates nothing, reads
// only inside the given view, and answers std::nullopt for anything that is not exactly the
// grammar, so that the caller can ignore the field and fall back to its own delay.
//
// Choices the RFC leaves to the recipient:
// * names are case-sensitive: the grammar spells day and month names with %s"…" and §5.6.7 says
//   HTTP-date is case sensitive. "sun, 06 nov 1994 …" is rejected.
// * the day name must be the weekday of the date (as RFC 5322 §3.3 requires of the format that
//   IMF-fixdate is a fixed subset of): a mismatch means a corrupt or hand-made value, and ignoring
//   it only costs the caller its own backoff.
// * second 60 (a leap second, allowed by RFC 5322 §3.3) is accepted at any minute and counts as
//   the second after :59. std::chrono::system_clock has no leap seconds, so 23:59:60 is the same
//   instant as 00:00:00 of the next day; the order of timestamps is kept.
// * a two-digit RFC 850 year is resolved against the caller's `now` by calendar year (UTC): the
//   latest year with those last two digits that is at most 50 years after now's year
//   (RFC 9110 §5.6.7 turns "more than 50 years in the future" into "the most recent past year").
// * optional whitespace (SP / HTAB) around the whole field value is skipped by parse_retry_after
//   (RFC 9110 §5.5 excludes it from the field value); parse_http_date takes the bare date, where
//   the grammar allows no extra whitespace.

namespace idem {

namespace detail {

inline constexpr std::array<std::string_view, 7> short_day_names = {"Sun", "Mon", "Tue", "Wed",
                                                                    "Thu", "Fri", "Sat"};
inline constexpr std::array<std::string_view, 7> long_day_names = {
    "Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
inline constexpr std::array<std::string_view, 12> month_names = {
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// The fields of one HTTP-date as written; nothing is validated yet.
struct http_date_fields {
  int weekday = 0;  // 0 = Sunday, as std::chrono::weekday counts
  int year = 0;
  int month = 0;  // 1-12
  int day = 0;
  int hour = 0;
  int minute = 0;
  int second = 0;
};

// The parsers below consume from the front of `in` and only ever look at in.front() or call
// starts_with/remove_prefix after a size check, so no input can make them read past the end.

constexpr bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

constexpr bool eat(std::string_view& in, std::string_view literal) noexcept {
  if (!in.starts_with(literal)) return false;
  in.remove_prefix(literal.size());
  return true;
}

// Exactly `count` ASCII digits (count <= 4, so the value cannot overflow).
constexpr bool eat_digits(std::string_view& in, std::size_t count, int& value) noexcept {
  if (in.size() < count) return false;
  int v = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (!is_digit(in[i])) return false;
    v = v * 10 + (in[i] - '0');
  }
  in.remove_prefix(count);
  value = v;
  return true;
}

template <std::size_t N>
constexpr bool eat_name(std::string_view& in, const std::array<std::string_view, N>& names,
                        int& index) noexcept {
  for (std::size_t i = 0; i < N; ++i) {
    if (eat(in, names[i])) {
      index = static_cast<int>(i);
      return true;
    }
  }
  return false;
}

// time-of-day = hour ":" minute ":" second, each 2DIGIT.
constexpr bool eat_time_of_day(std::string_view& in, http_date_fields& f) noexcept {
  return eat_digits(in, 2, f.hour) && eat(in, ":") && eat_digits(in, 2, f.minute) && eat(in, ":") &&
         eat_digits(in, 2, f.second);
}

// IMF-fixdate = day-name "," SP day SP month SP year SP time-of-day SP "GMT"
constexpr bool parse_imf_fixdate(std::string_view in, http_date_fields& f) noexcept {
  int month = 0;
  if (!(eat_name(in, short_day_names, f.weekday) && eat(in, ", ") && eat_digits(in, 2, f.day) &&
        eat(in, " ") && eat_name(in, month_names, month) && eat(in, " ") &&
        eat_digits(in, 4, f.year) && eat(in, " ") && eat_time_of_day(in, f) && eat(in, " GMT"))) {
    return false;
  }
  f.month = month + 1;
  return in.empty();
}

// rfc850-date = day-name-l "," SP day "-" month "-" 2DIGIT SP time-of-day SP "GMT"
// The year is left as its two digits; resolve_two_digit_year gives it a century.
constexpr bool parse_rfc850_date(std::string_view in, http_date_fields& f) noexcept {
  int month = 0;
  if (!(eat_name(in, long_day_names, f.weekday) && eat(in, ", ") && eat_digits(in, 2, f.day) &&
        eat(in, "-") && eat_name(in, month_names, month) && eat(in, "-") &&
        eat_digits(in, 2, f.year) && eat(in, " ") && eat_time_of_day(in, f) && eat(in, " GMT"))) {
    return false;
  }
  f.month = month + 1;
  return in.empty();
}

// asctime-date = day-name SP month SP ( 2DIGIT / ( SP DIGIT ) ) SP time-of-day SP year
// asctime() pads the day with a space ("Nov  6"); two digits ("Nov 06", "Nov 16") are also valid.
constexpr bool parse_asctime_date(std::string_view in, http_date_fields& f) noexcept {
  int month = 0;
  if (!(eat_name(in, short_day_names, f.weekday) && eat(in, " ") &&
        eat_name(in, month_names, month) && eat(in, " "))) {
    return false;
  }
  if (!(eat(in, " ") ? eat_digits(in, 1, f.day) : eat_digits(in, 2, f.day))) return false;
  if (!(eat(in, " ") && eat_time_of_day(in, f) && eat(in, " ") && eat_digits(in, 4, f.year))) {
    return false;
  }
  f.month = month + 1;
  return in.empty();
}

// RFC 9110 §5.6.7: a two-digit year that appears to be more than 50 years in the future is the
// most recent past year with the same last two digits. So: the latest year ending in `yy` that is
// at most reference_year + 50.
constexpr int resolve_two_digit_year(int yy, int reference_year) noexcept {
  const int limit = reference_year + 50;
  const int limit_yy = ((limit % 100) + 100) % 100;
  const int back = ((limit_yy - yy) % 100 + 100) % 100;
  return limit - back;
}

// The UTC calendar year of `now`, clamped to what std::chrono::year can hold so that a clock with
// a wide range cannot push the arithmetic out of range.
inline int year_of(std::chrono::system_clock::time_point now) noexcept {
  using namespace std::chrono;
  // ±30000 years around 1970 stays inside std::chrono::year's ±32767 even after the ±100 years
  // that resolve_two_digit_year may add; a nanosecond clock only spans ±292 years anyway.
  constexpr std::int64_t max_days = 365LL * 30000;
  std::int64_t d = floor<days>(now).time_since_epoch().count();
  if (d > max_days) d = max_days;
  if (d < -max_days) d = -max_days;
  const year_month_day ymd{sys_days{days{d}}};
  return static_cast<int>(ymd.year());
}

// Validates the fields and turns them into seconds since the Unix epoch. The range is about
// ±1e12 s (4-digit years, or a two-digit one resolved near a clamped reference year), far from
// overflowing std::int64_t.
inline std::optional<std::chrono::sys_seconds> to_sys_seconds(const http_date_fields& f) noexcept {
  using namespace std::chrono;
  if (f.year < static_cast<int>(year::min()) || f.year > static_cast<int>(year::max())) {
    return std::nullopt;
  }
  const year_month_day ymd{year{f.year}, month{static_cast<unsigned>(f.month)},
                           day{static_cast<unsigned>(f.day)}};
  if (!ymd.ok()) return std::nullopt;  // Feb 30, Feb 29 outside a leap year, Apr 31, day 00
  if (f.hour > 23 || f.minute > 59 || f.second > 60) return std::nullopt;
  const sys_days date{ymd};
  if (weekday{date} != weekday{static_cast<unsigned>(f.weekday)}) return std::nullopt;
  return sys_seconds{date} + hours{f.hour} + minutes{f.minute} + seconds{f.second};
}

// Any of the three HTTP-date forms, exactly, with no surrounding whitespace.
inline std::optional<std::chrono::sys_seconds> parse_http_date_seconds(
    std::string_view text, int reference_year) noexcept {
  // The forms differ by the fourth byte (',' / ' ' / a letter), so at most one can match.
  if (http_date_fields f; parse_imf_fixdate(text, f)) return to_sys_seconds(f);
  if (http_date_fields f; parse_asctime_date(text, f)) return to_sys_seconds(f);
  if (http_date_fields f; parse_rfc850_date(text, f)) {
    f.year = resolve_two_digit_year(f.year, reference_year);
    return to_sys_seconds(f);
  }
  return std::nullopt;
}

constexpr bool is_ows(char c) noexcept {
  return c == ' ' || c == '\t';
}

constexpr std::string_view trim_ows(std::string_view s) noexcept {
  while (!s.empty() && is_ows(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back()))
    s.remove_suffix(1);
  return s;
}

// The largest whole number of seconds that std::chrono::nanoseconds can hold.
inline constexpr std::int64_t max_delay_seconds =
    std::chrono::duration_cast<std::chrono::seconds>(std::chrono::nanoseconds::max()).count();

// delay-seconds = 1*DIGIT; any length is valid, so a value past what nanoseconds holds saturates.
constexpr std::optional<std::chrono::nanoseconds> parse_delay_seconds(std::string_view s) noexcept {
  if (s.empty()) return std::nullopt;
  std::int64_t value = 0;
  bool saturated = false;
  for (const char c : s) {
    if (!is_digit(c)) return std::nullopt;
    if (!saturated) {
      value = value * 10 + (c - '0');
      saturated = value > max_delay_seconds;  // checked every digit, so value * 10 cannot overflow
    }
  }
  if (saturated) return std::chrono::nanoseconds::max();
  return std::chrono::seconds{value};
}

// `target - now`, zero when target is not after now, std::chrono::nanoseconds::max() when the gap
// does not fit. Written so that no intermediate overflows for any `now` the clock can hold.
inline std::chrono::nanoseconds delay_until(std::chrono::sys_seconds target,
                                            std::chrono::system_clock::time_point now) noexcept {
  using namespace std::chrono;
  // Split now into whole seconds (floor) and a sub-second part in [0, 1 s), by truncating
  // division first so that nothing is multiplied back out of range.
  const auto since_epoch = now.time_since_epoch();
  auto whole = duration_cast<seconds>(since_epoch);
  auto fraction = since_epoch - whole;  // |fraction| < 1 s, same sign as since_epoch
  if (fraction < decltype(fraction)::zero()) {
    whole -= seconds{1};
    fraction += seconds{1};
  }
  const std::int64_t now_s = whole.count();
  const std::int64_t target_s = target.time_since_epoch().count();
  if (target_s <= now_s) return nanoseconds::zero();  // target <= floor(now) <= now
  if (now_s < target_s - max_delay_seconds) return nanoseconds::max();
  const std::int64_t gap = target_s - now_s;  // in [1, max_delay_seconds]
  return seconds{gap} - duration_cast<nanoseconds>(fraction);
}

}  // namespace detail

/// Parses an HTTP-date (RFC 9110 §5.6.7) in any of the three forms a recipient must accept:
/// IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), the obsolete RFC 850 form
/// ("Sunday, 06-Nov-94 08:49:37 GMT") and the asctime() form ("Sun Nov  6 08:49:37 1994").
/// `now` resolves the century of an RFC 850 two-digit year. Returns std::nullopt for anything that
/// is not one of those forms exactly, for a date that does not exist, for a day name that is not
/// the date's weekday, and for a date that system_clock::time_point cannot represent.
inline std::optional<std::chrono::system_clock::time_point> parse_http_date(
    std::string_view text, std::chrono::system_clock::time_point now) noexcept {
  using namespace std::chrono;
  const auto parsed = detail::parse_http_date_seconds(text, detail::year_of(now));
  if (!parsed) return std::nullopt;
  // Truncation toward zero keeps both bounds inside the clock's range.
  using clock_duration = std::chrono::system_clock::duration;
  constexpr auto lo = duration_cast<seconds>(clock_duration::min());
  constexpr auto hi = duration_cast<seconds>(clock_duration::max());
  const auto s = parsed->time_since_epoch();
  if (s < lo || s > hi) return std::nullopt;
  return std::chrono::system_clock::time_point{duration_cast<clock_duration>(s)};
}

/// As above, resolving an RFC 850 two-digit year against the current time.
inline std::optional<std::chrono::system_clock::time_point> parse_http_date(
    std::string_view text) noexcept {
  return parse_http_date(text, std::chrono::system_clock::now());
}

/// Parses a Retry-After field value (RFC 9110 §10.2.3): delay-seconds (1*DIGIT) or an HTTP-date,
/// with optional SP / HTAB around it. Returns how long to wait from `now`: a date not after `now`
/// gives zero, and a delay or date too far away for std::chrono::nanoseconds saturates to
/// nanoseconds::max(). Returns std::nullopt for anything malformed; the caller then ignores the
/// field (RFC 9110 §5.6.7 lets a recipient ignore an invalid date).
inline std::optional<std::chrono::nanoseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now) noexcept {
  const std::string_view v = detail::trim_ows(value);
  if (!v.empty() && detail::is_digit(v.front())) return detail::parse_delay_seconds(v);
  const auto date = detail::parse_http_date_seconds(v, detail::year_of(now));
  if (!date) return std::nullopt;
  return detail::delay_until(*date, now);
}

}  // namespace idem
// end idem/retry_after.hpp
// begin idem/retry_outcome.hpp
// What a retried operation returns: how it ended, its last result or error, its key and the
// history of its attempts.
//
// Ending is a value, not an exception: a spent budget or an open breaker is something the caller
// branches on. The last error is kept exactly as it was thrown, and value() rethrows it unchanged.
// The type depends only on the call's result type, never on the policies, so outcomes from
// differently configured wrappers mix freely.

#include <utility>

namespace idem {

/// Thrown by retry_outcome::value() when the operation ended without a value and without an
/// error of its own to rethrow: the breaker or the budget refused before any attempt could run.
class retry_error : public std::runtime_error {
 public:
  explicit retry_error(retry_verdict verdict)
      : std::runtime_error("idem::retrying gave up: " + std::string(to_string(verdict))),
        verdict_(verdict) {}
  retry_verdict verdict() const noexcept { return verdict_; }

 private:
  retry_verdict verdict_;
};

/// The attempts of one operation, oldest first. The first eight are held inline, so the common
/// case allocates nothing; more spill to the heap.
class attempt_history {
 public:
  static constexpr std::size_t inline_capacity = 8;

  attempt_history() = default;
  attempt_history(const attempt_history& other) : size_(other.size_), spilled_(other.spilled_) {
    copy_inline(other);
  }
  attempt_history(attempt_history&& other) noexcept
      : size_(other.size_), spilled_(std::move(other.spilled_)) {
    copy_inline(other);
  }
  attempt_history& operator=(const attempt_history& other) {
    if (this != &other) {
      size_ = other.size_;
      spilled_ = other.spilled_;
      copy_inline(other);
    }
    return *this;
  }
  attempt_history& operator=(attempt_history&& other) noexcept {
    if (this != &other) {
      size_ = other.size_;
      spilled_ = std::move(other.spilled_);
      copy_inline(other);
    }
    return *this;
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  const attempt_record& operator[](std::size_t i) const noexcept {
    return i < inline_capacity ? inline_[i] : spilled_[i - inline_capacity];
  }
  const attempt_record& back() const noexcept { return (*this)[size_ - 1]; }

  /// Appends a record and returns it, for the loop to fill in the delay later.
  attempt_record& push(const attempt_record& record) {
    attempt_record* slot;
    if (size_ < inline_capacity) {
      slot = &inline_[size_];
      *slot = record;
    } else {
      spilled_.push_back(record);
      slot = &spilled_.back();
    }
    ++size_;
    return *slot;
  }

 private:
  // Only the records in use: the rest were never written.
  void copy_inline(const attempt_history& other) noexcept {
    std::copy_n(other.inline_.begin(), std::min(size_, inline_capacity), inline_.begin());
  }

  // Left unwritten beyond size_, so that an outcome does not clear eight records it may not use.
  std::array<attempt_record, inline_capacity> inline_;
  std::size_t size_ = 0;
  std::vector<attempt_record> spilled_;
};

template <class Call, class Policies>
class retrying;

namespace detail {
/// Stands in for the value of a call that returns void.
struct no_value {};
}  // namespace detail

/// The result of `retrying::operator()`: one operation, all its attempts.
template <class Result>
class retry_outcome {
  using stored = std::conditional_t<std::is_void_v<Result>, detail::no_value, Result>;

 public:
  using value_type = Result;

  retry_verdict verdict() const noexcept { return verdict_; }
  /// The operation's effect happened: an attempt succeeded, or the resolve hook found it.
  bool succeeded() const noexcept {
    return verdict_ == retry_verdict::succeeded || verdict_ == retry_verdict::resolved;
  }
  explicit operator bool() const noexcept { return succeeded(); }

  /// The last attempt returned a value (a success, or a failure judged from a value such as a
  /// 503 response), or the resolve hook supplied one.
  bool has_value() const noexcept { return value_.has_value(); }

  /// The value if there is one; otherwise rethrows the last attempt's exception unchanged, or
  /// throws retry_error when no attempt ran.
  decltype(auto) value() & { return get(*this); }
  decltype(auto) value() const& { return get(*this); }
  decltype(auto) value() && {
    if constexpr (std::is_void_v<Result>) {
      get(*this);
    } else {
      return std::move(get(*this));
    }
  }

  /// The last attempt's exception, exactly as thrown; null if it returned a value.
  const std::exception_ptr& error() const noexcept { return error_; }

  /// The idempotency key every attempt was given.
  std::string_view key() const noexcept { return key_.view(); }
  int attempts() const noexcept { return static_cast<int>(history_.size()); }
  const attempt_history& history() const noexcept { return history_; }

 private:
  template <class, class>
  friend class retrying;

  template <class Self>
  static decltype(auto) get(Self& self) {
    if (!self.value_) {
      if (self.error_) std::rethrow_exception(self.error_);
      throw retry_error(self.verdict_);
    }
    if constexpr (!std::is_void_v<Result>) return (*self.value_);
  }

  retry_verdict verdict_ = retry_verdict::succeeded;
  std::optional<stored> value_;
  std::exception_ptr error_;
  key_buffer key_;
  attempt_history history_;
};

}  // namespace idem
// end idem/retry_outcome.hpp
// begin idem/retrying.hpp
// idem::retrying<Call, Policies>: a call retried only when that is safe, under one idempotency key.
//
//   auto charge = idem::retrying{[&](const idem::attempt_context& attempt) {
//     return http.post("/charges", body, {{"Idempotency-Key", attempt.key()}},
//                      attempt.time_left());
//   }};
//   auto outcome = charge();            // an idem::retry_outcome<response>
//   if (outcome) use(outcome.value());
//
// What it guarantees:
//   * the key is generated once per operation, before the first attempt, and every attempt gets
//     it: a retry can never go out under a new key;
//   * only what the classifier calls transient or ambiguous is repeated, and only when the call
//     is keyed or idempotent by nature;
//   * at most max_attempts attempts (the first counts), and never a wait that ends past the
//     deadline; a Retry-After that the server sends is honoured, one beyond the deadline ends
//     the retries at once;
//   * a retrying call inside another one on the same thread makes one attempt: only the
//     outermost layer retries;
//   * after an ambiguous failure, the call's optional `resolve` hook is asked whether the effect
//     landed, and a yes ends the retries;
//   * a budget and a circuit breaker can refuse, and the operation then ends with their verdict.
//
// Concurrency: one retrying object may be called from many threads at once. Each operation has
// its own history, each thread its own random engine; the budget, breaker and observer are
// shared and thread-safe. The success path writes no memory shared between threads.

namespace idem {

/// How many attempts one operation may make and how long it may take. Defaults come from the
/// policies; a wrapper can be given others at construction.
struct retry_limits {
  int max_attempts;                   // the first attempt included; at least 1
  std::chrono::nanoseconds deadline;  // for all attempts and waits together; positive
};

namespace detail {

// How many retrying operations are running on this thread, outermost first. constinit keeps the
// access a plain thread-local load, with no initialisation guard.
inline constinit thread_local int retry_depth = 0;

class retry_layer {
 public:
  retry_layer() noexcept : nested_(retry_depth++ > 0) {}
  ~retry_layer() { --retry_depth; }
  retry_layer(const retry_layer&) = delete;
  retry_layer& operator=(const retry_layer&) = delete;
  bool nested() const noexcept { return nested_; }

 private:
  bool nested_;
};

template <class Call, class... Args>
concept takes_context = std::invocable<Call&, const attempt_context&, Args&...>;

template <class Call, class... Args>
struct call_result {
  using type = std::invoke_result_t<Call&, Args&...>;
};
template <class Call, class... Args>
requires takes_context<Call, Args...>
struct call_result<Call, Args...> {
  using type = std::invoke_result_t<Call&, const attempt_context&, Args&...>;
};
template <class Call, class... Args>
using call_result_t = typename call_result<Call, Args...>::type;

template <class Call, class... Args>
concept resolvable_with_arguments = requires(Call& call, const attempt_context& context,
                                             Args&... args) {
  call.resolve(context, args...);
};
template <class Call>
concept resolvable = requires(Call& call, const attempt_context& context) {
  call.resolve(context);
};

// The engine each thread draws from for one retrying object. A thread seeds it when it starts
// using the object, or comes back to it after using another: from the object's 256-bit seed
// with a stream number mixed in that the object never hands out twice (one atomic add). After
// that, operations just draw from it, so the hot path neither seeds nor writes anything shared.
// Streams of one object differ in their seed, so keys drawn on different threads are
// independent 122-bit values; a single thread using one fixed-seed object replays exactly.
template <class Random>
struct thread_engine {
  std::uint64_t object = 0;  // the id of the object the engine is seeded for; 0 for none
  std::optional<Random> engine;
};
template <class Random>
inline constinit thread_local thread_engine<Random> thread_engines{};
inline std::atomic<std::uint64_t> next_object_id{1};

template <class TimePoint>
constexpr std::chrono::nanoseconds since_epoch(const TimePoint& t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch());
}

}  // namespace detail

/// A call with a resolve hook: `resolver(attempt_context)` (or with the call's arguments too)
/// asks the downstream system, by the key, whether an ambiguous attempt took effect after all.
/// It returns std::optional<Result> (bool for a call returning void): a value, or true, when it
/// landed.
template <class Call, class Resolver>
struct resolvable_call {
  Call call;
  Resolver resolver;

  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    return std::invoke(call, std::forward<Args>(args)...);
  }
  template <class... Args>
  decltype(auto) resolve(const attempt_context& context, Args&... args) {
    if constexpr (std::invocable<Resolver&, const attempt_context&, Args&...>) {
      return std::invoke(resolver, context, args...);
    } else {
      return std::invoke(resolver, context);
    }
  }
};

template <class Call, class Resolver>
resolvable_call<Call, Resolver> with_resolver(Call call, Resolver resolver) {
  return {std::move(call), std::move(resolver)};
}

template <class Call, class Policies = default_policies>
class retrying {
 public:
  using clock_type = typename Policies::clock;
  using random_type = typename Policies::random;
  using backoff_type = typename Policies::backoff;
  using budget_type = typename Policies::budget;
  using breaker_type = typename Policies::breaker;
  using classifier_type = typename Policies::classifier;
  using observer_type = typename Policies::observer;
  using key_generator_type = typename Policies::key_generator;

  static_assert(Clock<clock_type>,
                "Policies::clock must provide now() returning its time_point, wall_now() "
                "returning std::chrono::system_clock::time_point, and sleep_for(nanoseconds).");
  static_assert(RandomSource<random_type>,
                "Policies::random must be a std::uniform_random_bit_generator of 64-bit words "
                "that can be constructed from an idem::random_seed, like idem::xoshiro256ss.");
  static_assert(Backoff<backoff_type, random_type>,
                "Policies::backoff must provide delay(int retry_index, nanoseconds previous, "
                "Random&) returning std::chrono::nanoseconds.");
  static_assert(Budget<budget_type>,
                "Policies::budget must be copyable and provide on_request(), "
                "try_acquire_retry(retry_reason) returning bool, and on_success(retry_reason).");
  static_assert(Breaker<breaker_type>,
                "Policies::breaker must be copyable and provide allow(nanoseconds) returning "
                "bool, on_success(nanoseconds), on_failure(nanoseconds), and state(nanoseconds) "
                "returning idem::breaker_state.");
  static_assert(Observer<observer_type>,
                "Policies::observer must be copyable and provide on_attempt(const "
                "attempt_event&), on_delay(const delay_event&) and on_finish(const "
                "finish_event&).");
  static_assert(KeyGenerator<key_generator_type, random_type, clock_type>,
                "Policies::key_generator must provide generate(Random&, Clock&) returning "
                "idem::key_buffer.");
  static_assert(Policies::max_attempts >= 1,
                "Policies::max_attempts counts the first attempt, so it must be at least 1.");
  static_assert(Policies::deadline > decltype(Policies::deadline)::zero(),
                "Policies::deadline must be positive.");

  /// The parts a wrapper is built from. Each is default-constructed from its policy type unless
  /// given; budgets, breakers, manual clocks and counting observers share state with the copy
  /// they were given, so one budget can guard several wrappers.
  struct options {
    clock_type clock{};
    backoff_type backoff{};
    budget_type budget{};
    breaker_type breaker{};
    classifier_type classifier{};
    observer_type observer{};
    key_generator_type key_generator{};
    /// Seeds the jitter and the keys, for tests that replay; unset, 256 nondeterministic bits
    /// are drawn. Never fix it in production: two processes with one seed make the same keys.
    std::optional<std::uint64_t> seed{};
    retry_limits limits{Policies::max_attempts, Policies::deadline};
  };

  explicit retrying(Call call) : retrying(std::move(call), options{}) {}

  retrying(Call call, options parts)
      : call_(std::move(call)),
        clock_(std::move(parts.clock)),
        backoff_(std::move(parts.backoff)),
        budget_(std::move(parts.budget)),
        breaker_(std::move(parts.breaker)),
        classifier_(std::move(parts.classifier)),
        observer_(std::move(parts.observer)),
        key_generator_(std::move(parts.key_generator)),
        seed_(parts.seed ? seed_from(*parts.seed) : nondeterministic_seed()),
        limits_(parts.limits) {
    if (limits_.max_attempts < 1) {
      throw std::invalid_argument(
          "idem::retrying: max_attempts counts the first attempt and "
          "must be at least 1");
    }
    if (limits_.deadline <= std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument("idem::retrying: the deadline must be positive");
    }
  }

  retrying(const retrying&) = delete;
  retrying& operator=(const retrying&) = delete;

  /// Runs one operation: as many attempts as the policies allow, each given an attempt_context
  /// (when the call accepts one) and `args` as lvalues, since they may be needed again.
  template <class... Args>
  requires detail::takes_context<Call, Args...> || std::invocable<Call&, Args&...>
      retry_outcome<detail::call_result_t<Call, Args...>>
  operator()(Args&&... args) {
    using result_type = detail::call_result_t<Call, Args...>;
    static_assert(Classifier<classifier_type, result_type>,
                  "Policies::classifier must provide classify(const Result&) for this call's "
                  "result type and classify_exception(std::exception_ptr), both returning "
                  "idem::classification.");

    retry_outcome<result_type> outcome;
    const detail::retry_layer layer;
    const bool may_repeat =
        Policies::safety != call_safety::unsafe && (Policies::retry_when_nested || !layer.nested());

    random_type& rng = operation_engine();
    outcome.key_ = key_generator_.generate(rng, clock_);
    const auto start = clock_.now();
    budget_.on_request();

    std::chrono::nanoseconds previous_delay{0};
    retry_reason last_retry = retry_reason::none;
    for (int attempt = 1;; ++attempt) {
      const auto attempt_start = attempt == 1 ? start : clock_.now();
      const std::chrono::nanoseconds elapsed = attempt_start - start;
      if (!breaker_.allow(detail::since_epoch(attempt_start))) {
        outcome.verdict_ = retry_verdict::circuit_open;
        break;
      }
      const attempt_context context{attempt, outcome.key(), time_left(elapsed)};

      bool threw = false;
      try {
        run_attempt(outcome, context, args...);
      } catch (...) {
        outcome.value_.reset();
        outcome.error_ = std::current_exception();
        threw = true;
      }
      classification verdict;
      if (threw) {
        verdict = classifier_.classify_exception(outcome.error_);
      } else if constexpr (std::is_void_v<result_type>) {
        verdict = classification{};
      } else {
        verdict = classifier_.classify(*outcome.value_);
      }

      attempt_record& record =
          outcome.history_.push({attempt, verdict.kind, verdict.code, threw, elapsed, {}, false});
      observer_.on_attempt(attempt_event{outcome.key(), record});

      if (verdict.kind == disposition::success) {
        breaker_.on_success(detail::since_epoch(attempt_start));
        budget_.on_success(last_retry);
        outcome.verdict_ = retry_verdict::succeeded;
        break;
      }

      const auto now = clock_.now();
      if (verdict.fault) {
        breaker_.on_failure(detail::since_epoch(now));
      } else {
        breaker_.on_success(detail::since_epoch(now));
      }
      const next_step step =
          after_failure(verdict, attempt, may_repeat, now - start, previous_delay, rng);
      if (step.stop) {
        outcome.verdict_ = *step.stop;
        break;
      }
      last_retry = step.reason;
      record.delay_after = step.delay;
      record.delay_from_retry_after = step.from_retry_after;
      observer_.on_delay(
          delay_event{outcome.key(), attempt + 1, step.delay, step.from_retry_after});
      clock_.sleep_for(step.delay);
      previous_delay = step.delay;

      if (verdict.kind == disposition::ambiguous) {
        const attempt_context next{attempt + 1, outcome.key(), time_left(clock_.now() - start)};
        if (effect_landed(outcome, next, args...)) {
          outcome.verdict_ = retry_verdict::resolved;
          break;
        }
      }
    }

    if constexpr (!std::is_same_v<observer_type, no_observer>) {
      const std::chrono::nanoseconds total = clock_.now() - start;
      observer_.on_finish(finish_event{outcome.key(), outcome.verdict_, outcome.attempts(), total});
    }
    return outcome;
  }

  Call& call() noexcept { return call_; }
  clock_type& clock() noexcept { return clock_; }
  budget_type& budget() noexcept { return budget_; }
  breaker_type& breaker() noexcept { return breaker_; }
  observer_type& observer() noexcept { return observer_; }
  const retry_limits& limits() const noexcept { return limits_; }

 private:
  std::chrono::nanoseconds time_left(std::chrono::nanoseconds elapsed) const noexcept {
    const auto left = limits_.deadline - elapsed;
    return left > std::chrono::nanoseconds::zero() ? left : std::chrono::nanoseconds::zero();
  }

  // What follows a failed attempt: stop with a verdict, or wait and try again. The rules live
  // here, apart from the loop that runs attempts and waits, so that an asynchronous version can
  // apply the same rules between co_awaits.
  struct next_step {
    std::optional<retry_verdict> stop;
    std::chrono::nanoseconds delay{};
    bool from_retry_after = false;
    retry_reason reason = retry_reason::none;
  };

  next_step after_failure(const classification& verdict, int attempt, bool may_repeat,
                          std::chrono::nanoseconds elapsed, std::chrono::nanoseconds previous_delay,
                          random_type& rng) {
    if (verdict.kind == disposition::permanent) return {retry_verdict::permanent_failure};
    if (!may_repeat) return {retry_verdict::not_retried};
    if (attempt >= limits_.max_attempts) return {retry_verdict::attempts_exhausted};

    // The wait: the server's Retry-After when it sent a valid one, else the backoff.
    std::optional<std::chrono::nanoseconds> delay;
    if (!verdict.retry_after.empty()) {
      delay = parse_retry_after(verdict.retry_after, clock_.wall_now());
    }
    const bool from_retry_after = delay.has_value();
    if (!delay) delay = backoff_.delay(attempt - 1, previous_delay, rng);
    if (*delay < std::chrono::nanoseconds::zero()) delay = std::chrono::nanoseconds::zero();

    // A wait that ends at or past the deadline would leave the next attempt no time at all.
    if (*delay >= time_left(elapsed)) return {retry_verdict::deadline_exceeded};

    // Asked last, so that a refusal for any other reason spends no token.
    const auto reason =
        verdict.kind == disposition::ambiguous ? retry_reason::ambiguous : retry_reason::transient;
    if (!budget_.try_acquire_retry(reason)) return {retry_verdict::budget_exhausted};
    return {std::nullopt, *delay, from_retry_after, reason};
  }

  random_type& operation_engine() {
    auto& local = detail::thread_engines<random_type>;
    if (local.object != id_) {
      random_seed seed = seed_;
      std::uint64_t stream = streams_.fetch_add(1, std::memory_order_relaxed);
      for (auto& word : seed.words)
        word ^= detail::splitmix64(stream);
      local.engine.emplace(seed);
      local.object = id_;
    }
    return *local.engine;
  }

  template <class Result, class... Args>
  void run_attempt(retry_outcome<Result>& outcome, const attempt_context& context, Args&... args) {
    if (outcome.error_) outcome.error_ = nullptr;
    if constexpr (std::is_void_v<Result>) {
      invoke_call(context, args...);
      outcome.value_.emplace();
    } else {
      outcome.value_.emplace(invoke_call(context, args...));
    }
  }

  template <class... Args>
  decltype(auto) invoke_call(const attempt_context& context, Args&... args) {
    if constexpr (detail::takes_context<Call, Args...>) {
      return std::invoke(call_, context, args...);
    } else {
      return std::invoke(call_, args...);
    }
  }

  // Asks the call's resolve hook, if it has one, whether the ambiguous attempt took effect.
  template <class Result, class... Args>
  bool effect_landed(retry_outcome<Result>& outcome, const attempt_context& context,
                     Args&... args) {
    if constexpr (detail::resolvable_with_arguments<Call, Args...> || detail::resolvable<Call>) {
      auto answer = [&] {
        if constexpr (detail::resolvable_with_arguments<Call, Args...>) {
          return call_.resolve(context, args...);
        } else {
          return call_.resolve(context);
        }
      }();
      if constexpr (std::is_void_v<Result>) {
        static_assert(std::is_convertible_v<decltype(answer), bool>,
                      "resolve(attempt_context) of a call returning void must return bool: true "
                      "when the effect landed.");
        if (!answer) return false;
        outcome.value_.emplace();
      } else {
        static_assert(std::is_convertible_v<decltype(answer), std::optional<Result>>,
                      "resolve(attempt_context) must return std::optional<Result>: the result "
                      "when the effect landed, std::nullopt when it did not.");
        std::optional<Result> found = std::move(answer);
        if (!found) return false;
        outcome.value_.emplace(std::move(*found));
      }
      outcome.error_ = nullptr;
      return true;
    } else {
      return false;
    }
  }

  Call call_;
  [[no_unique_address]] clock_type clock_;
  [[no_unique_address]] backoff_type backoff_;
  [[no_unique_address]] budget_type budget_;
  [[no_unique_address]] breaker_type breaker_;
  [[no_unique_address]] classifier_type classifier_;
  [[no_unique_address]] observer_type observer_;
  [[no_unique_address]] key_generator_type key_generator_;
  random_seed seed_;
  const std::uint64_t id_ = detail::next_object_id.fetch_add(1, std::memory_order_relaxed);
  std::atomic<std::uint64_t> streams_{0};
  retry_limits limits_;
};

template <class Call>
retrying(Call) -> retrying<Call, default_policies>;

}  // namespace idem
// end idem/retrying.hpp
// begin idem/version.hpp
// idem — exactly-once effect under at-least-once delivery.
// The library's version, for code that must branch on it.

#define IDEM_VERSION_MAJOR 0
#define IDEM_VERSION_MINOR 1
#define IDEM_VERSION_PATCH 0

namespace idem {

/// The version as a number: major * 10000 + minor * 100 + patch.
inline constexpr int version =
    IDEM_VERSION_MAJOR * 10000 + IDEM_VERSION_MINOR * 100 + IDEM_VERSION_PATCH;

}  // namespace idem
// end idem/version.hpp
// end idem/idem.hpp
