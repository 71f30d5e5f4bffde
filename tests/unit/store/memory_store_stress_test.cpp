// Concurrency, model and paused-holder tests for the in-memory stores: idem::memory_store, and
// idem::locked_store (the reference model) beside it, so every check also keeps testing the model.
//
// * Stress: eight threads run mixed operations (claims with the same or another fingerprint,
//   completes, releases, checkpoints, finds, sweeps, stuck) on 128 keys in two scopes, so they
//   collide constantly, while a shared logical clock moves fast enough that leases lapse
//   (takeovers) and records expire (new claims, sweeps) mid-run. Each operation is stamped by one
//   global sequence counter just before the call and just after it. The history must then be
//   linearizable against a sequential model of one key that follows locked_store's rules
//   (key_model): Wing and Gong's search with Lowe's memoisation, one key at a time, since
//   operations on different keys are independent and the whole history is linearizable exactly
//   when each key's is. 8 x 1,000,000 operations in optimised builds (about 5 s to run and check
//   on two cores, 570 MB); 8 x 100,000 under sanitizers or without optimisation.
//
//   sweep touches every key but is not atomic across keys in a sharded store, so each key sees it
//   as an event of its own somewhere inside the sweep call: "forget the record if it expired by
//   the sweep's now". Its count is only checked loosely (never more than the records claimed).
//   Each record stuck lists is likewise an observation of its key somewhere inside the call.
//   Checks that need no model run beside the search: one holder per fence within a record,
//   fences that only grow within it, and a completed response that its fence's holder stored.
//
// * Model: seeded random sequences, single-threaded, with capacity limits small enough to be hit
//   and times that land on lease and retention boundaries, must get the same answers, field by
//   field, from each store as from a store-wide model built on key_model. Run on locked_store,
//   this is what keeps the checker's model honest. A failing sequence is shrunk and listed.
//
// * Paused holder: a holder paused on its own thread past its lease loses every write to the
//   thread that took over.
//
// The checks are shown to bite: they reject two deliberately broken stores (one decides a claim
// under its lock and applies it after letting go, one completes under whatever fence is current)
// and hand-built histories that no order explains.
#include <catch2/catch.hpp>

#include <idem/store/contract.hpp>
#include <idem/store/locked.hpp>
#if __has_include(<idem/store/memory.hpp>)
#include <idem/store/memory.hpp>
#endif
#include <idem/testing/store_conformance.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

// The stores every template case below runs against (a macro only because Catch2 takes the
// type list as macro arguments).
#if __has_include(<idem/store/memory.hpp>)
#define IDEM_STRESS_STORES idem::memory_store, idem::locked_store
#else
#define IDEM_STRESS_STORES idem::locked_store
#endif

// Sanitized and unoptimised builds run the stress scaled down, so they stay under a minute.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__) || !defined(__OPTIMIZE__)
#define IDEM_STRESS_SCALED_DOWN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define IDEM_STRESS_SCALED_DOWN 1
#endif
#endif

namespace {

#ifdef IDEM_STRESS_SCALED_DOWN
constexpr bool scaled_down = true;
#undef IDEM_STRESS_SCALED_DOWN
#else
constexpr bool scaled_down = false;
#endif

using namespace std::chrono_literals;
using idem::claim_status;
using idem::store_time;
namespace conformance = idem::testing::conformance;

// ---- time, fingerprints and payloads, in the compact form histories keep --------------------

// Model time: whole milliseconds after conformance::start(), in 32 bits.
using tick_count = std::uint32_t;
constexpr std::chrono::milliseconds tick{1};
// A value that came back in a form the model never produces (a time off the tick grid, bytes we
// never wrote): it mismatches whatever the model expects.
constexpr std::uint32_t garbled = std::numeric_limits<std::uint32_t>::max();
constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();

store_time at(tick_count t) {
  return conformance::start() + tick * t;
}

std::uint32_t ticks_of(store_time time) {
  const auto since = time - conformance::start();
  if (since < since.zero() || since % tick != since.zero()) return garbled;
  const auto count = since / tick;
  return count < garbled ? static_cast<std::uint32_t>(count) : garbled;
}

std::string time_text(store_time time) {
  const std::uint32_t t = ticks_of(time);
  if (t != garbled) return "t" + std::to_string(t);
  return "start" + std::to_string((time - conformance::start()).count()) + "ns";
}

constexpr std::uint8_t fingerprint_count = 4;
constexpr std::uint8_t unknown_fingerprint = 0xff;
constexpr std::uint8_t wrong_identity = 0xfe;  // the record named another (scope, key)

const idem::digest& fingerprint(std::uint8_t id) {
  static const std::array<idem::digest, fingerprint_count> all{
      conformance::print(1), conformance::print(2), conformance::print(3), conformance::print(4)};
  static const idem::digest none{};
  return id < fingerprint_count ? all[id] : none;
}

std::uint8_t fingerprint_id(const idem::digest& seen) {
  for (std::uint8_t id = 0; id < fingerprint_count; ++id) {
    if (fingerprint(id) == seen) return id;
  }
  return unknown_fingerprint;
}

// Response and recovery bytes are named by a token: 0 is no bytes; any other token is written as
// its four bytes and a filler whose length varies with it, so sizes vary and a torn or foreign
// value decodes to `garbled`.
std::size_t payload_size(std::uint32_t token) {
  return token == 0 ? 0 : 4 + token % 40;
}

std::string payload(std::uint32_t token) {
  std::string bytes(payload_size(token), static_cast<char>('a' + token % 26));
  for (std::size_t i = 0; i < 4 && i < bytes.size(); ++i)
    bytes[i] = static_cast<char>((token >> (8 * i)) & 0xff);
  return bytes;
}

std::uint32_t token_of(std::string_view bytes) {
  if (bytes.empty()) return 0;
  if (bytes.size() < 4) return garbled;
  std::uint32_t token = 0;
  for (std::size_t i = 0; i < 4; ++i)
    token |= std::uint32_t{static_cast<std::uint8_t>(bytes[i])} << (8 * i);
  if (token == 0 || bytes.size() != payload_size(token)) return garbled;
  const char filler = static_cast<char>('a' + token % 26);
  for (std::size_t i = 4; i < bytes.size(); ++i) {
    if (bytes[i] != filler) return garbled;
  }
  return token;
}

std::string payload_text(std::uint32_t token) {
  if (token == 0) return "no bytes";
  if (token == garbled) return "bytes we never wrote";
  return "payload #" + std::to_string(token);
}

constexpr std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9;
  x = (x ^ (x >> 27)) * 0x94d049bb133111eb;
  return x ^ (x >> 31);
}

std::string status_text(claim_status status) {
  switch (status) {
    case claim_status::claimed:
      return "claimed";
    case claim_status::taken_over:
      return "taken_over";
    case claim_status::existing:
      return "existing";
    case claim_status::full:
      return "full";
  }
  return "status " + std::to_string(static_cast<int>(status));
}

// ---- the sequential model of one key ------------------------------------------------------

// A record as find, claim and stuck show it, times in ticks and bytes as tokens.
struct snapshot {
  std::uint32_t fence = 0;
  tick_count created = 0;
  tick_count lease_until = 0;
  tick_count expires = 0;
  std::uint32_t response = 0;
  std::uint32_t recovery = 0;
  std::uint8_t fingerprint = 0;
  bool completed = false;
  friend bool operator==(const snapshot&, const snapshot&) = default;
};

std::string describe(const snapshot& s) {
  std::string fingerprint_text = s.fingerprint == wrong_identity ? "another key's"
                                 : s.fingerprint == unknown_fingerprint
                                     ? "unknown"
                                     : std::to_string(s.fingerprint);
  return std::string("{") + (s.completed ? "completed" : "in_progress") + " fence " +
         std::to_string(s.fence) + " fp " + fingerprint_text + " created t" +
         std::to_string(s.created) + " lease_until t" + std::to_string(s.lease_until) +
         " expires t" + std::to_string(s.expires) + " response " + payload_text(s.response) +
         " recovery " + payload_text(s.recovery) + "}";
}

// Whether a record must name its scope and key: a claim's snapshots may leave both empty, since
// the caller has them (store.hpp); find and stuck must name the record they show.
enum class naming { required, may_be_omitted };

bool names_match(const idem::record& r, std::string_view scope, std::string_view key, naming rule) {
  if (rule == naming::may_be_omitted && r.scope.empty() && r.key.empty()) return true;
  return r.scope == scope && r.key == key;
}

snapshot snapshot_of(const idem::record& r, std::string_view scope, std::string_view key,
                     naming rule = naming::required) {
  snapshot s;
  s.fence = r.fence < garbled ? static_cast<std::uint32_t>(r.fence) : garbled;
  s.created = ticks_of(r.created_at);
  s.lease_until = ticks_of(r.lease_until);
  s.expires = ticks_of(r.expires_at);
  s.response = token_of(r.response);
  s.recovery = token_of(r.recovery);
  s.fingerprint = names_match(r, scope, key, rule) ? fingerprint_id(r.fingerprint) : wrong_identity;
  s.completed = r.state == idem::record_state::completed;
  return s;
}

idem::record record_of(const snapshot& s, std::string_view scope, std::string_view key) {
  idem::record r;
  r.scope = scope;
  r.key = key;
  r.fingerprint = fingerprint(s.fingerprint);
  r.state = s.completed ? idem::record_state::completed : idem::record_state::in_progress;
  r.fence = s.fence;
  r.created_at = at(s.created);
  r.lease_until = at(s.lease_until);
  r.expires_at = at(s.expires);
  r.response = payload(s.response);
  r.recovery = payload(s.recovery);
  return r;
}

struct claim_args {
  std::uint8_t fingerprint = 0;
  tick_count now = 0;
  tick_count lease = 0;
  tick_count retention = 0;
};

struct claim_answer {
  claim_status status = claim_status::full;
  std::uint32_t fence = 0;
  snapshot seen{};  // taken_over, existing
};

// One key's entry exactly as locked_store keeps it: present from its claim until something
// removes it (a replacing claim, or sweep once it has expired), a released one staying as a
// tombstone that remembers its fence. Writes check the fence but not expiry, as locked_store's do.
struct key_model {
  bool present = false;
  bool released = false;
  snapshot held{};

  bool live(tick_count now) const { return present && !released && now < held.expires; }
  bool holds(std::uint32_t fence) const { return present && !released && held.fence == fence; }

  // What claim does to a live record: take it over or report it. Nothing when the key is free.
  std::optional<claim_answer> claim_live(const claim_args& a) {
    if (!live(a.now)) return std::nullopt;
    if (!held.completed && held.fingerprint == a.fingerprint && held.lease_until <= a.now) {
      ++held.fence;
      held.lease_until = a.now + a.lease;
      return claim_answer{claim_status::taken_over, held.fence, held};
    }
    return claim_answer{claim_status::existing, 0, held};
  }
  // Drops an expired or released entry before a new claim; answers the fence it remembered.
  std::uint32_t vacate() {
    const std::uint32_t fence = present ? held.fence : 0;
    *this = key_model{};
    return fence;
  }
  claim_answer create(const claim_args& a, std::uint32_t previous_fence) {
    present = true;
    released = false;
    held = snapshot{.fence = previous_fence + 1,
                    .created = a.now,
                    .lease_until = a.now + a.lease,
                    .expires = a.now + a.retention,
                    .fingerprint = a.fingerprint};
    return {claim_status::claimed, held.fence, {}};
  }
  // claim in a store with room to spare (the stress never bounds its store).
  claim_answer claim(const claim_args& a) {
    if (std::optional<claim_answer> answer = claim_live(a)) return *answer;
    return create(a, vacate());
  }
  bool complete(std::uint32_t fence, std::uint32_t response) {
    if (!holds(fence)) return false;
    held.response = response;
    held.recovery = 0;
    held.completed = true;
    return true;
  }
  bool release(std::uint32_t fence) {
    if (!holds(fence)) return false;
    // A tombstone keeps the fence only: its response and recovery bytes are freed.
    held.response = 0;
    held.recovery = 0;
    released = true;
    return true;
  }
  bool checkpoint(std::uint32_t fence, std::uint32_t recovery, tick_count lease_until) {
    if (!holds(fence)) return false;
    held.recovery = recovery;
    held.lease_until = lease_until;
    return true;
  }
  std::optional<snapshot> find(tick_count now) const {
    if (!live(now)) return std::nullopt;
    return held;
  }
  bool stuck(tick_count now) const {
    return live(now) && !held.completed && held.lease_until <= now;
  }
  // sweep's part in one key.
  bool expire(tick_count now) {
    if (!present || now < held.expires) return false;
    vacate();
    return true;
  }

  std::uint64_t hash() const {
    std::uint64_t h = mix(std::uint64_t{present} | std::uint64_t{released} << 1 |
                          std::uint64_t{held.completed} << 2 |
                          std::uint64_t{held.fingerprint} << 8 | std::uint64_t{held.fence} << 16);
    h = mix(h ^ (held.created | std::uint64_t{held.lease_until} << 32));
    h = mix(h ^ (held.expires | std::uint64_t{held.response} << 32));
    return mix(h ^ held.recovery);
  }
};

std::string describe(const key_model& m) {
  if (!m.present) return "no entry";
  return std::string(m.released ? "released tombstone " : "") + describe(m.held);
}

// ---- stores built for these tests ---------------------------------------------------------

// Whether S is built from options with record and byte bounds (the memory and locked stores).
template <class S>
constexpr bool has_bounds() {
  if constexpr (requires { typename S::options; }) {
    return requires(typename S::options & b) {
      b.max_records;
      b.max_bytes;
    };
  } else {
    return false;
  }
}

template <class S>
S make_store(std::size_t max_records = unbounded, std::size_t max_bytes = unbounded,
             std::size_t expected_records = 0) {
  if constexpr (has_bounds<S>()) {
    typename S::options bounds{};
    bounds.max_records = max_records;
    bounds.max_bytes = max_bytes;
    if constexpr (requires(typename S::options & b) { b.expected_records; }) {
      if (expected_records != 0) bounds.expected_records = expected_records;
    }
    return S{bounds};
  } else {
    return S{};
  }
}

// Broken on purpose: right one call at a time, but claim decides under the lock and applies its
// decision after letting go of it, the read-then-insert race store.hpp forbids. Every other
// operation is atomic. The checker must reject what it does under contention.
class check_then_act_store {
 public:
  check_then_act_store() : shared_(std::make_shared<shared>()) {}

  idem::claim_result claim(const idem::claim_request& request) {
    const claim_args args{fingerprint_id(request.fingerprint), ticks_of(request.now),
                          static_cast<tick_count>(request.lease / tick),
                          static_cast<tick_count>(request.retention / tick)};
    key_model decided;
    {
      const std::lock_guard lock(shared_->mutex);
      decided = shared_->keys[id(request.scope, request.key)];
    }
    const claim_answer answer = decided.claim(args);
    std::this_thread::yield();  // the window: another claim decides on the same state
    {
      const std::lock_guard lock(shared_->mutex);
      shared_->keys[id(request.scope, request.key)] = decided;
    }
    idem::claim_result result{answer.status, answer.fence, {}};
    if (answer.status == claim_status::taken_over || answer.status == claim_status::existing) {
      result.existing = record_of(answer.seen, request.scope, request.key);
    }
    return result;
  }
  bool complete(const idem::fenced_key& held, std::string_view response, store_time) {
    const std::lock_guard lock(shared_->mutex);
    return shared_->keys[id(held.scope, held.key)].complete(static_cast<std::uint32_t>(held.fence),
                                                            token_of(response));
  }
  bool release(const idem::fenced_key& held) {
    const std::lock_guard lock(shared_->mutex);
    return shared_->keys[id(held.scope, held.key)].release(static_cast<std::uint32_t>(held.fence));
  }
  bool checkpoint(const idem::fenced_key& held, std::string_view recovery, store_time lease_until) {
    const std::lock_guard lock(shared_->mutex);
    return shared_->keys[id(held.scope, held.key)].checkpoint(
        static_cast<std::uint32_t>(held.fence), token_of(recovery), ticks_of(lease_until));
  }
  std::optional<idem::record> find(std::string_view scope, std::string_view key, store_time now) {
    const std::lock_guard lock(shared_->mutex);
    const std::optional<snapshot> found = shared_->keys[id(scope, key)].find(ticks_of(now));
    if (!found) return std::nullopt;
    return record_of(*found, scope, key);
  }
  std::size_t sweep(store_time now) {
    const std::lock_guard lock(shared_->mutex);
    std::size_t removed = 0;
    for (auto& [name, entry] : shared_->keys)
      removed += entry.expire(ticks_of(now)) ? 1 : 0;
    return removed;
  }
  std::vector<idem::record> stuck(store_time now, std::size_t limit) {
    const std::lock_guard lock(shared_->mutex);
    std::vector<idem::record> out;
    for (const auto& [name, entry] : shared_->keys) {
      if (out.size() >= limit) break;
      if (entry.stuck(ticks_of(now))) out.push_back(record_of(entry.held, name.first, name.second));
    }
    return out;
  }

 private:
  using identity = std::pair<std::string, std::string>;
  static identity id(std::string_view scope, std::string_view key) {
    return {std::string(scope), std::string(key)};
  }
  struct shared {
    std::mutex mutex;
    std::map<identity, key_model> keys;
  };
  std::shared_ptr<shared> shared_;
};

// Broken on purpose: locked_store, except that complete writes under whatever fence the record
// has now (read first, then written), so a holder that was taken over still overwrites.
class fence_blind_store {
 public:
  using limits = idem::locked_store::options;
  fence_blind_store() = default;
  explicit fence_blind_store(limits bounds) : inner_(bounds) {}

  idem::claim_result claim(const idem::claim_request& request) { return inner_.claim(request); }
  bool complete(const idem::fenced_key& held, std::string_view response, store_time now) {
    const std::optional<idem::record> found = inner_.find(held.scope, held.key, now);
    if (!found) return false;
    std::this_thread::yield();
    return inner_.complete({held.scope, held.key, found->fence}, response, now);
  }
  bool release(const idem::fenced_key& held) { return inner_.release(held); }
  bool checkpoint(const idem::fenced_key& held, std::string_view recovery, store_time lease_until) {
    return inner_.checkpoint(held, recovery, lease_until);
  }
  std::optional<idem::record> find(std::string_view scope, std::string_view key, store_time now) {
    return inner_.find(scope, key, now);
  }
  std::size_t sweep(store_time now) { return inner_.sweep(now); }
  std::vector<idem::record> stuck(store_time now, std::size_t limit) {
    return inner_.stuck(now, limit);
  }

 private:
  idem::locked_store inner_;
};

static_assert(idem::Store<check_then_act_store> && idem::Store<fence_blind_store>);

// ---- histories ----------------------------------------------------------------------------

enum class operation : std::uint8_t { claim, complete, release, checkpoint, find, sweep, stuck };

// One operation as a thread saw it: 52 bytes, so eight million fit in 416 MB.
struct event {
  std::uint32_t invoked = 0;   // the global sequence number taken just before the call
  std::uint32_t returned = 0;  // ... and just after it returned
  tick_count now = 0;          // the time passed; checkpoint's lease_until is derived from it
  // claim: the fence answered; complete, release, checkpoint: the fence held; sweep: how many
  // it removed; stuck: how many it listed.
  std::uint32_t fence = 0;
  std::uint16_t key = 0;  // claim, complete, release, checkpoint, find
  operation kind = operation::find;
  std::uint8_t argument = 0;  // claim: the fingerprint; checkpoint: the lease code
  std::uint8_t outcome = 0;   // claim: the claim_status; writes: applied; find: found
  snapshot seen{};            // claim (taken_over, existing) and find (found)
};
// complete and checkpoint write payload(invoked): unique, and known to the checker for free.
static_assert(sizeof(event) <= 52, "A history holds eight million events: keep one compact.");

// A record stuck listed: an observation of its key.
struct observation {
  std::uint32_t event = 0;  // the stuck call
  std::uint16_t key = 0;    // unknown_key: a record no one ever claimed
  snapshot seen{};
};
constexpr std::uint16_t unknown_key = 0xffff;

// Where and how hard the stress runs.
struct stress_shape {
  int threads = 8;
  int operations_per_thread = 1000;
  int keys_per_scope = 64;  // two scopes
  std::uint64_t seed = 1;

  int keys() const { return 2 * keys_per_scope; }
  // A key sees about one operation in keys(), and the clock moves about 1.75 ticks an
  // operation: a lease lasts some three of the key's operations, a record some twenty-five.
  tick_count lease() const { return static_cast<tick_count>(6 * keys()); }
  tick_count retention() const { return static_cast<tick_count>(48 * keys()); }
  // checkpoint's lease_until: now plus one of these.
  tick_count lease_offset(std::uint8_t code) const {
    const std::array<tick_count, 4> offsets{0, lease() / 2, lease(), 2 * lease()};
    return offsets[code & 3];
  }
};

struct key_table {
  explicit key_table(int keys_per_scope) {
    for (int s = 0; s < 2; ++s) {
      for (int k = 0; k < keys_per_scope; ++k) {
        scope.push_back("tenant-" + std::to_string(s));
        key.push_back("order-" + std::to_string(k));
        index.emplace(std::pair{scope.back(), key.back()},
                      static_cast<std::uint16_t>(index.size()));
      }
    }
  }
  std::uint16_t index_of(std::string_view s, std::string_view k) const {
    const auto found = index.find(std::pair{std::string(s), std::string(k)});
    return found == index.end() ? unknown_key : found->second;
  }
  std::vector<std::string> scope, key;
  std::map<std::pair<std::string, std::string>, std::uint16_t> index;
};

struct history {
  stress_shape shape;
  std::vector<event> events;  // thread t's operations at [t * operations_per_thread, ...)
  std::vector<observation> observations;
  std::string store_failure;  // what a store threw, if it did

  int thread_of(std::uint32_t index) const {
    return static_cast<int>(index / static_cast<std::uint32_t>(shape.operations_per_thread));
  }
};

// ---- the stress run -----------------------------------------------------------------------

struct stress_clocks {
  std::atomic<std::uint32_t> sequence{1};
  std::atomic<tick_count> clock{1000};
  std::atomic<bool> go{false};
  std::mutex failure_mutex;
  std::string failure;
};

template <class S>
void stress_thread(S store, const stress_shape& shape, const key_table& table, int thread,
                   stress_clocks& shared, std::span<event> out, std::vector<observation>& listed) {
  std::mt19937_64 random(shape.seed * 7919 + static_cast<std::uint64_t>(thread));
  // Claims this thread holds (or held, until it was taken over): writes mostly use one of these.
  struct holding {
    std::uint16_t key = 0;
    std::uint32_t fence = 0;
    bool valid = false;
  };
  std::array<holding, 4> holdings{};
  const tick_count lease = shape.lease();
  const std::uint32_t first_index =
      static_cast<std::uint32_t>(thread) * static_cast<std::uint32_t>(shape.operations_per_thread);
  while (!shared.go.load(std::memory_order_acquire))
    std::this_thread::yield();

  for (std::size_t i = 0; i < out.size(); ++i) {
    event& ev = out[i];
    const std::uint64_t r = random();
    const unsigned pick = r & 4095;
    const bool jump = ((r >> 12) & 255) == 0;
    ev.now = shared.clock.fetch_add(jump ? lease / 4 : 1, std::memory_order_relaxed);
    ev.key = static_cast<std::uint16_t>((r >> 20) % static_cast<std::uint64_t>(shape.keys()));
    holding& slot = holdings[(r >> 40) & 3];
    // complete, checkpoint and release are by the holder of `slot`, or by a stranger guessing a
    // small fence on a random key.
    const bool writes = pick >= 1400 && pick < 3000;
    if (writes && slot.valid) ev.key = slot.key;
    const std::uint32_t write_fence =
        slot.valid ? slot.fence : 1 + static_cast<std::uint32_t>((r >> 44) % 3);
    const std::string& scope = table.scope[ev.key];
    const std::string& key = table.key[ev.key];
    auto stamped = [&](auto&& call) {
      ev.invoked = shared.sequence.fetch_add(1);
      auto result = call();
      ev.returned = shared.sequence.fetch_add(1);
      return result;
    };
    try {
      if (pick < 1400) {
        ev.kind = operation::claim;
        ev.argument = ((r >> 48) & 7) == 0 ? 1 : 0;
        const idem::claim_result result = stamped([&] {
          return store.claim({scope, key, fingerprint(ev.argument), at(ev.now), tick * lease,
                              tick * shape.retention()});
        });
        ev.outcome = static_cast<std::uint8_t>(result.status);
        ev.fence = result.fence < garbled ? static_cast<std::uint32_t>(result.fence) : garbled;
        if (result.status == claim_status::taken_over || result.status == claim_status::existing) {
          ev.seen = snapshot_of(result.existing, scope, key, naming::may_be_omitted);
        }
        if (result.status == claim_status::claimed || result.status == claim_status::taken_over) {
          slot = {ev.key, ev.fence, true};
        }
      } else if (pick < 2200) {
        ev.kind = operation::complete;
        ev.fence = write_fence;
        ev.outcome = stamped([&] {
          return store.complete({scope, key, write_fence}, payload(ev.invoked), at(ev.now));
        });
        slot.valid = false;
      } else if (pick < 2700) {
        ev.kind = operation::checkpoint;
        ev.fence = write_fence;
        ev.argument = static_cast<std::uint8_t>((r >> 52) & 3);
        ev.outcome = stamped([&] {
          return store.checkpoint({scope, key, write_fence}, payload(ev.invoked),
                                  at(ev.now + shape.lease_offset(ev.argument)));
        });
      } else if (pick < 3000) {
        ev.kind = operation::release;
        ev.fence = write_fence;
        ev.outcome = stamped([&] { return store.release({scope, key, write_fence}); });
        slot.valid = false;
      } else if (pick < 4092) {
        ev.kind = operation::find;
        const std::optional<idem::record> found =
            stamped([&] { return store.find(scope, key, at(ev.now)); });
        ev.outcome = found.has_value();
        if (found) ev.seen = snapshot_of(*found, scope, key);
      } else if (pick < 4094) {
        ev.kind = operation::sweep;
        const std::size_t removed = stamped([&] { return store.sweep(at(ev.now)); });
        ev.fence = removed < garbled ? static_cast<std::uint32_t>(removed) : garbled;
      } else {
        ev.kind = operation::stuck;
        const std::vector<idem::record> records =
            stamped([&] { return store.stuck(at(ev.now), 4); });
        ev.fence = static_cast<std::uint32_t>(records.size());
        for (const idem::record& r : records) {
          listed.push_back({first_index + static_cast<std::uint32_t>(i),
                            table.index_of(r.scope, r.key), snapshot_of(r, r.scope, r.key)});
        }
      }
    } catch (const std::exception& error) {
      // The stress never bounds its store: nothing may throw. Stop this thread; the check fails.
      const std::lock_guard lock(shared.failure_mutex);
      if (shared.failure.empty()) {
        shared.failure = "thread " + std::to_string(thread) + " operation " + std::to_string(i) +
                         " threw: " + error.what();
      }
      ev = event{};  // not checked: the failure is reported instead
      return;
    }
  }
}

template <class S>
history run_stress(S store, const stress_shape& shape) {
  const key_table table(shape.keys_per_scope);
  history h;
  h.shape = shape;
  h.events.resize(static_cast<std::size_t>(shape.threads) *
                  static_cast<std::size_t>(shape.operations_per_thread));
  std::vector<std::vector<observation>> listed(static_cast<std::size_t>(shape.threads));
  stress_clocks shared;
  std::vector<std::thread> pool;
  for (int t = 0; t < shape.threads; ++t) {
    const std::span<event> slice(
        h.events.data() +
            static_cast<std::size_t>(t) * static_cast<std::size_t>(shape.operations_per_thread),
        static_cast<std::size_t>(shape.operations_per_thread));
    pool.emplace_back([&, t, slice] {
      stress_thread(store, shape, table, t, shared, slice, listed[static_cast<std::size_t>(t)]);
    });
  }
  shared.go.store(true, std::memory_order_release);
  for (std::thread& thread : pool)
    thread.join();
  for (const std::vector<observation>& some : listed)
    h.observations.insert(h.observations.end(), some.begin(), some.end());
  h.store_failure = shared.failure;
  return h;
}

// ---- the linearizability check ------------------------------------------------------------

enum class call_source : std::uint8_t { event, sweep, observation };

// One operation in one key's history: an event on the key, a sweep's visit to it, or a record
// stuck listed for it.
struct call {
  std::uint32_t invoked = 0;
  std::uint32_t returned = 0;
  std::uint32_t index = 0;  // into events (event, sweep) or observations
  call_source from = call_source::event;
};

std::string describe(const history& h, const call& c) {
  const std::uint32_t event_index =
      c.from == call_source::observation ? h.observations[c.index].event : c.index;
  const event& e = h.events[event_index];
  std::string out = "#" + std::to_string(c.invoked) + ".." + std::to_string(c.returned) +
                    " thread " + std::to_string(h.thread_of(event_index)) + ": ";
  const std::string now = "now t" + std::to_string(e.now);
  const auto applied = [&] { return e.outcome != 0 ? std::string(" -> true") : " -> false"; };
  if (c.from == call_source::observation) {
    return out + "stuck(" + now + ") listed " + describe(h.observations[c.index].seen);
  }
  switch (e.kind) {
    case operation::claim: {
      const auto status = static_cast<claim_status>(e.outcome);
      out += "claim(fp " + std::to_string(e.argument) + ", " + now + ") -> " + status_text(status);
      if (status == claim_status::claimed || status == claim_status::taken_over) {
        out += " fence " + std::to_string(e.fence);
      }
      if (status == claim_status::taken_over || status == claim_status::existing) {
        out += " " + describe(e.seen);
      }
      return out;
    }
    case operation::complete:
      return out + "complete(fence " + std::to_string(e.fence) + ", payload #" +
             std::to_string(e.invoked) + ", " + now + ")" + applied();
    case operation::release:
      return out + "release(fence " + std::to_string(e.fence) + ")" + applied();
    case operation::checkpoint:
      return out + "checkpoint(fence " + std::to_string(e.fence) + ", payload #" +
             std::to_string(e.invoked) + ", lease_until t" +
             std::to_string(e.now + h.shape.lease_offset(e.argument)) + ")" + applied();
    case operation::find:
      return out + "find(" + now + ") -> " + (e.outcome != 0 ? describe(e.seen) : "nothing");
    case operation::sweep:
      return out + "sweep(" + now + ") -> removed " + std::to_string(e.fence) + " in all keys";
    case operation::stuck:
      return out + "stuck(" + now + ")";
  }
  return out;
}

// A set of (linearized calls, model state) pairs, each as two 64-bit hashes: the calls as the
// XOR of a random value per call (so adding or removing one is one XOR), the state as its hash.
// A collision could only prune a path the search should have tried (a false alarm, with
// probability around 2^-64 per pair), never accept a history.
class configuration_set {
 public:
  bool insert(std::uint64_t calls, std::uint64_t state) {
    state |= 1;  // 0 marks an empty slot
    if ((size_ + 1) * 2 > slots_.size()) grow();
    if (place(slots_, calls, state)) {
      ++size_;
      return true;
    }
    return false;
  }
  std::size_t size() const { return size_; }

 private:
  struct slot {
    std::uint64_t calls = 0;
    std::uint64_t state = 0;
  };
  static bool place(std::vector<slot>& slots, std::uint64_t calls, std::uint64_t state) {
    const std::size_t mask = slots.size() - 1;
    for (std::size_t i = mix(calls ^ mix(state)) & mask;; i = (i + 1) & mask) {
      if (slots[i].state == 0) {
        slots[i] = {calls, state};
        return true;
      }
      if (slots[i].calls == calls && slots[i].state == state) return false;
    }
  }
  void grow() {
    std::vector<slot> larger(slots_.empty() ? 1024 : slots_.size() * 2);
    for (const slot& s : slots_) {
      if (s.state != 0) place(larger, s.calls, s.state);
    }
    slots_.swap(larger);
  }
  std::vector<slot> slots_;
  std::size_t size_ = 0;
};

// Wing and Gong's search for an order of one key's calls that respects real time (a call that
// returned before another was invoked comes first) and in which the model answers every call as
// the store did; Lowe's memoisation never explores one (linearized calls, state) pair twice.
class linearization_search {
 public:
  linearization_search(const history& h, std::vector<call> calls)
      : history_(h), calls_(std::move(calls)) {
    // Entry 0 is the list's head; call c has entry 2c+1 for its invocation, 2c+2 for its return.
    const std::size_t entries = 2 * calls_.size() + 1;
    std::vector<std::pair<std::uint32_t, std::int32_t>> order;
    order.reserve(entries - 1);
    for (std::size_t c = 0; c < calls_.size(); ++c) {
      order.emplace_back(calls_[c].invoked, static_cast<std::int32_t>(2 * c + 1));
      order.emplace_back(calls_[c].returned, static_cast<std::int32_t>(2 * c + 2));
    }
    std::sort(order.begin(), order.end());
    previous_.assign(entries, -1);
    next_.assign(entries, -1);
    std::int32_t last = 0;
    for (const auto& [sequence, entry] : order) {
      next_[static_cast<std::size_t>(last)] = entry;
      previous_[static_cast<std::size_t>(entry)] = last;
      last = entry;
    }
    if (next_[0] != -1) frontier_ = call_of(next_[0]);
  }

  // False when no order works, or when the search would visit more than `budget` states.
  bool run(std::size_t budget) {
    struct frame {
      std::int32_t entry;
      key_model state;
    };
    std::vector<frame> stack;
    key_model state;
    std::uint64_t linearized = 0;
    std::int32_t entry = next_[0];
    while (next_[0] != -1) {
      const std::size_t c = call_of(entry);
      if (is_invocation(entry)) {
        key_model trial = state;
        if (step(trial, calls_[c])) {
          const std::uint64_t with = linearized ^ call_hash(c);
          if (seen_.insert(with, trial.hash())) {
            stack.push_back({entry, state});
            state = trial;
            linearized = with;
            lift(entry);
            if (stack.size() > deepest_) {
              deepest_ = stack.size();
              deepest_state_ = state;
              frontier_ = next_[0] == -1 ? 0 : call_of(next_[0]);
            }
            if (seen_.size() > budget) {
              exhausted_ = true;
              return false;
            }
            entry = next_[0];
            continue;
          }
        }
        entry = next_[static_cast<std::size_t>(entry)];
      } else {
        // The first pending call returned before any order could place it: backtrack.
        if (stack.empty()) return false;
        const frame top = stack.back();
        stack.pop_back();
        state = top.state;
        linearized ^= call_hash(call_of(top.entry));
        unlift(top.entry);
        entry = next_[static_cast<std::size_t>(top.entry)];
      }
    }
    return true;
  }

  std::size_t configurations() const { return seen_.size(); }

  // Where the search got stuck: the calls around the first one it could never place.
  std::string explain() const {
    std::vector<std::size_t> by_invocation(calls_.size());
    for (std::size_t c = 0; c < calls_.size(); ++c)
      by_invocation[c] = c;
    std::sort(by_invocation.begin(), by_invocation.end(),
              [&](std::size_t a, std::size_t b) { return calls_[a].invoked < calls_[b].invoked; });
    const auto at = static_cast<std::size_t>(
        std::find(by_invocation.begin(), by_invocation.end(), frontier_) - by_invocation.begin());
    std::string out = exhausted_ ? "the search ran out of budget; " : "";
    out += "at most " + std::to_string(deepest_) + " of " + std::to_string(calls_.size()) +
           " calls could be ordered; the model then held " + describe(deepest_state_) +
           ", and no order explains call " + describe(history_, calls_[frontier_]) +
           "\ncalls around it, in invocation order:\n";
    const std::size_t from = at > 12 ? at - 12 : 0;
    for (std::size_t i = from; i < std::min(by_invocation.size(), at + 12); ++i) {
      out += (i == at ? "  >> " : "     ") + describe(history_, calls_[by_invocation[i]]) + "\n";
    }
    // Calls invoked earlier that were still running then: a paused thread's call overlaps many.
    std::string overlapping;
    const std::uint32_t window_start = calls_[by_invocation[from]].invoked;
    for (std::size_t i = 0; i < from; ++i) {
      const call& c = calls_[by_invocation[i]];
      if (c.returned > window_start) overlapping += "     " + describe(history_, c) + "\n";
    }
    if (!overlapping.empty()) out += "and, invoked earlier but still running then:\n" + overlapping;
    return out;
  }

 private:
  static bool is_invocation(std::int32_t entry) { return entry % 2 == 1; }
  static std::size_t call_of(std::int32_t entry) { return static_cast<std::size_t>(entry - 1) / 2; }
  std::uint64_t call_hash(std::size_t c) const { return mix(std::uint64_t{calls_[c].invoked}); }

  // Takes a call's two entries out of the list; unlift puts them back, in reverse order.
  void lift(std::int32_t entry) {
    const auto e = static_cast<std::size_t>(entry);
    next_[static_cast<std::size_t>(previous_[e])] = next_[e];
    previous_[static_cast<std::size_t>(next_[e])] = previous_[e];
    const std::size_t match = e + 1;
    next_[static_cast<std::size_t>(previous_[match])] = next_[match];
    if (next_[match] != -1) previous_[static_cast<std::size_t>(next_[match])] = previous_[match];
  }
  void unlift(std::int32_t entry) {
    const auto e = static_cast<std::size_t>(entry);
    const std::size_t match = e + 1;
    next_[static_cast<std::size_t>(previous_[match])] = static_cast<std::int32_t>(match);
    if (next_[match] != -1) {
      previous_[static_cast<std::size_t>(next_[match])] = static_cast<std::int32_t>(match);
    }
    next_[static_cast<std::size_t>(previous_[e])] = entry;
    previous_[static_cast<std::size_t>(next_[e])] = entry;
  }

  // Applies a call to the model; false when the model answers otherwise than the store did.
  bool step(key_model& model, const call& c) const {
    if (c.from == call_source::observation) {
      const observation& o = history_.observations[c.index];
      return model.stuck(history_.events[o.event].now) && model.held == o.seen;
    }
    const event& e = history_.events[c.index];
    if (c.from == call_source::sweep) {
      model.expire(e.now);
      return true;
    }
    const stress_shape& shape = history_.shape;
    switch (e.kind) {
      case operation::claim: {
        const claim_answer answer =
            model.claim({e.argument, e.now, shape.lease(), shape.retention()});
        if (static_cast<std::uint8_t>(answer.status) != e.outcome || answer.fence != e.fence) {
          return false;
        }
        const bool shows_record =
            answer.status == claim_status::taken_over || answer.status == claim_status::existing;
        return !shows_record || answer.seen == e.seen;
      }
      case operation::complete:
        return model.complete(e.fence, e.invoked) == (e.outcome != 0);
      case operation::release:
        return model.release(e.fence) == (e.outcome != 0);
      case operation::checkpoint:
        return model.checkpoint(e.fence, e.invoked, e.now + shape.lease_offset(e.argument)) ==
               (e.outcome != 0);
      case operation::find: {
        const std::optional<snapshot> found = model.find(e.now);
        return found.has_value() == (e.outcome != 0) && (!found || *found == e.seen);
      }
      case operation::sweep:
      case operation::stuck:
        break;  // never a key's own event
    }
    return false;
  }

  const history& history_;
  std::vector<call> calls_;
  std::vector<std::int32_t> previous_, next_;
  configuration_set seen_;
  std::size_t deepest_ = 0;
  key_model deepest_state_{};
  std::size_t frontier_ = 0;
  bool exhausted_ = false;
};

// Checks that need no model, on one key's calls:
//  * one holder per fence: within one record (its created_at: every claim gets its own `now`),
//    no fence is granted twice, and a grant that follows another in real time has a higher one;
//  * a completed record's response is one a complete under that record's fence stored.
std::string check_key_invariants(const history& h, const std::vector<call>& calls) {
  struct grant {
    tick_count created;
    std::uint32_t fence;
    std::uint32_t invoked, returned;
    std::uint32_t index;
  };
  std::vector<grant> grants;
  std::unordered_map<std::uint32_t, std::uint32_t> stored;  // payload token -> fence it held
  for (const call& c : calls) {
    if (c.from != call_source::event) continue;
    const event& e = h.events[c.index];
    const auto status = static_cast<claim_status>(e.outcome);
    if (e.kind == operation::claim && status == claim_status::claimed) {
      grants.push_back({e.now, e.fence, c.invoked, c.returned, c.index});
    } else if (e.kind == operation::claim && status == claim_status::taken_over) {
      grants.push_back({e.seen.created, e.fence, c.invoked, c.returned, c.index});
    } else if (e.kind == operation::complete && e.outcome != 0) {
      stored.emplace(e.invoked, e.fence);
    }
  }
  std::sort(grants.begin(), grants.end(), [](const grant& a, const grant& b) {
    return a.created != b.created ? a.created < b.created : a.invoked < b.invoked;
  });
  for (std::size_t first = 0; first < grants.size();) {
    std::size_t end = first;
    while (end < grants.size() && grants[end].created == grants[first].created)
      ++end;
    for (std::size_t j = first; j < end; ++j) {
      for (std::size_t i = first; i < j; ++i) {
        const grant& a = grants[i];
        const grant& b = grants[j];
        const bool after = a.returned < b.invoked;
        if (a.fence == b.fence || (after && b.fence < a.fence)) {
          return std::string(a.fence == b.fence ? "one fence granted twice"
                                                : "a fence went backwards") +
                 " in the record created at t" + std::to_string(a.created) + ":\n  " +
                 describe(h, call{a.invoked, a.returned, a.index, call_source::event}) + "\n  " +
                 describe(h, call{b.invoked, b.returned, b.index, call_source::event}) + "\n";
        }
      }
    }
    first = end;
  }
  for (const call& c : calls) {
    const snapshot* seen = nullptr;
    if (c.from == call_source::observation) {
      seen = &h.observations[c.index].seen;
    } else if (c.from == call_source::event) {
      const event& e = h.events[c.index];
      const bool shows = (e.kind == operation::find && e.outcome != 0) ||
                         (e.kind == operation::claim &&
                          static_cast<claim_status>(e.outcome) == claim_status::existing);
      if (shows) seen = &e.seen;
    }
    if (seen == nullptr || !seen->completed) continue;
    const auto writer = stored.find(seen->response);
    if (writer == stored.end() || writer->second != seen->fence) {
      return "a completed record shows a response no complete under its fence " +
             std::to_string(seen->fence) + " stored: " + describe(h, c) + "\n";
    }
  }
  return {};
}

struct check_report {
  bool linearizable = true;
  bool invariants_hold = true;
  std::string failure;  // the first key (or global check) that failed, and why
  std::size_t calls = 0;
  std::size_t configurations = 0;  // the search's effort, summed over keys
  // What the history exercised, so a test can insist the interesting cases happened.
  std::array<std::size_t, 4> claims{};  // by claim_status
  std::size_t reclaimed = 0;            // claimed under a fence above 1: after release or expiry
  std::size_t completes_applied = 0, completes_refused = 0;
  std::size_t releases_applied = 0, checkpoints_applied = 0;
  std::size_t found = 0, not_found = 0;
  std::size_t sweeps = 0, swept = 0, stuck_listed = 0;
};

check_report check_history(const history& h) {
  check_report report;
  const std::size_t keys = static_cast<std::size_t>(h.shape.keys());
  std::vector<std::vector<call>> calls(keys);
  std::vector<std::uint32_t> sweeps;
  for (std::uint32_t i = 0; i < h.events.size(); ++i) {
    const event& e = h.events[i];
    if (e.invoked == 0) continue;  // never ran: its thread stopped when the store threw
    switch (e.kind) {
      case operation::sweep:
        sweeps.push_back(i);
        ++report.sweeps;
        report.swept += e.fence;
        continue;
      case operation::stuck:
        report.stuck_listed += e.fence;
        if (e.fence > 4) {
          report.invariants_hold = false;
          report.failure += "stuck listed more records than its limit: " +
                            describe(h, call{e.invoked, e.returned, i, call_source::event}) + "\n";
        }
        continue;
      case operation::claim:
        ++report.claims[std::min<std::size_t>(e.outcome, 3)];
        if (static_cast<claim_status>(e.outcome) == claim_status::claimed && e.fence > 1) {
          ++report.reclaimed;
        }
        break;
      case operation::complete:
        ++(e.outcome != 0 ? report.completes_applied : report.completes_refused);
        break;
      case operation::release:
        report.releases_applied += e.outcome;
        break;
      case operation::checkpoint:
        report.checkpoints_applied += e.outcome;
        break;
      case operation::find:
        ++(e.outcome != 0 ? report.found : report.not_found);
        break;
    }
    calls[e.key].push_back({e.invoked, e.returned, i, call_source::event});
  }
  for (std::uint32_t i = 0; i < h.observations.size(); ++i) {
    const observation& o = h.observations[i];
    const event& e = h.events[o.event];
    if (o.key >= keys) {
      report.invariants_hold = false;
      report.failure += "stuck listed a record of a key no one claimed: " +
                        describe(h, call{e.invoked, e.returned, i, call_source::observation}) +
                        "\n";
      continue;
    }
    calls[o.key].push_back({e.invoked, e.returned, i, call_source::observation});
  }
  // Every removal removes a record some claim created, and each record is removed once.
  if (report.swept > report.claims[static_cast<std::size_t>(claim_status::claimed)]) {
    report.invariants_hold = false;
    report.failure += "sweeps removed " + std::to_string(report.swept) +
                      " records, more than the " + std::to_string(report.claims[0]) +
                      " ever claimed\n";
  }
  if (!h.store_failure.empty()) {
    report.linearizable = false;
    report.failure += "the store threw: " + h.store_failure + "\n";
  }

  struct key_verdict {
    std::string invariants, order;
    std::size_t calls = 0, configurations = 0;
  };
  std::vector<key_verdict> verdicts(keys);
  std::atomic<std::size_t> next_key{0};
  auto check_keys = [&] {
    for (std::size_t k = next_key++; k < keys; k = next_key++) {
      std::vector<call> mine = std::move(calls[k]);
      for (const std::uint32_t s : sweeps)
        mine.push_back({h.events[s].invoked, h.events[s].returned, s, call_source::sweep});
      key_verdict& verdict = verdicts[k];
      verdict.invariants = check_key_invariants(h, mine);
      verdict.calls = mine.size();
      linearization_search search(h, std::move(mine));
      if (!search.run(std::size_t{64} << 20)) verdict.order = search.explain();
      verdict.configurations = search.configurations();
    }
  };
  std::vector<std::thread> checkers;
  const unsigned workers = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  for (unsigned w = 1; w < workers; ++w)
    checkers.emplace_back(check_keys);
  check_keys();
  for (std::thread& checker : checkers)
    checker.join();

  const key_table table(h.shape.keys_per_scope);
  for (std::size_t k = 0; k < keys; ++k) {
    const key_verdict& verdict = verdicts[k];
    report.calls += verdict.calls;
    report.configurations += verdict.configurations;
    const std::string name = table.scope[k] + "/" + table.key[k];
    if (!verdict.invariants.empty()) {
      if (report.invariants_hold) report.failure += "key " + name + ": " + verdict.invariants;
      report.invariants_hold = false;
    }
    if (!verdict.order.empty()) {
      if (report.linearizable) {
        report.failure += "key " + name + " is not linearizable: " + verdict.order;
      }
      report.linearizable = false;
    }
  }
  return report;
}

std::string coverage(const check_report& r) {
  return "claims: " + std::to_string(r.claims[0]) + " claimed (" + std::to_string(r.reclaimed) +
         " under a fence above 1), " + std::to_string(r.claims[1]) + " taken over, " +
         std::to_string(r.claims[2]) + " existing, " + std::to_string(r.claims[3]) +
         " full; completes " + std::to_string(r.completes_applied) + " applied, " +
         std::to_string(r.completes_refused) + " refused; releases " +
         std::to_string(r.releases_applied) + " applied; checkpoints " +
         std::to_string(r.checkpoints_applied) + " applied; finds " + std::to_string(r.found) +
         " found, " + std::to_string(r.not_found) + " not; " + std::to_string(r.sweeps) +
         " sweeps removed " + std::to_string(r.swept) + "; stuck listed " +
         std::to_string(r.stuck_listed) + "; search: " + std::to_string(r.calls) + " calls, " +
         std::to_string(r.configurations) + " states";
}

// Hand-built histories for the checker's own tests: one thread per event.
struct history_builder {
  history h;
  history_builder() {
    h.shape.threads = 1;
    h.shape.operations_per_thread = 1;
    h.shape.keys_per_scope = 1;
  }
  history_builder& add(event e) {
    h.events.push_back(e);
    h.shape.threads = static_cast<int>(h.events.size());
    return *this;
  }
};

event claimed(std::uint32_t invoked, std::uint32_t returned, tick_count now, std::uint32_t fence) {
  event e;
  e.invoked = invoked;
  e.returned = returned;
  e.now = now;
  e.kind = operation::claim;
  e.outcome = static_cast<std::uint8_t>(claim_status::claimed);
  e.fence = fence;
  return e;
}

// ---- the model of a whole store, for the single-threaded comparison -----------------------

// locked_store as key models plus its capacity accounting: a claim of a free key needs a record
// and the key's bytes of room, first sweeping what has expired; a complete or checkpoint that
// would pass max_bytes writes nothing and throws full.
struct store_model {
  struct named_key {
    std::string_view scope, key;
  };
  // Scopes and keys that a joined identity would confuse ("a:b"+"c" and "a"+"b:c").
  static constexpr std::array<named_key, 6> names{{{"tenant", "k1"},
                                                   {"tenant", "k2"},
                                                   {"tenant", "k3"},
                                                   {"other", "k1"},
                                                   {"a:b", "c"},
                                                   {"a", "b:c"}}};
  enum class write { refused, applied, full };

  std::size_t max_records = unbounded;
  std::size_t max_bytes = unbounded;
  std::array<key_model, names.size()> keys{};

  static std::size_t identity_bytes(std::size_t k) {
    return names[k].scope.size() + names[k].key.size();
  }
  std::size_t records() const {
    return static_cast<std::size_t>(
        std::count_if(keys.begin(), keys.end(), [](const key_model& m) { return m.present; }));
  }
  std::size_t bytes() const {
    std::size_t total = 0;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (keys[k].present) {
        total += identity_bytes(k) + payload_size(keys[k].held.response) +
                 payload_size(keys[k].held.recovery);
      }
    }
    return total;
  }
  bool has_room(std::size_t new_bytes) const {
    const std::size_t held = bytes();
    return records() + 1 <= max_records && held <= max_bytes && new_bytes <= max_bytes - held;
  }

  claim_answer claim(std::size_t k, const claim_args& a) {
    if (std::optional<claim_answer> answer = keys[k].claim_live(a)) return *answer;
    const std::uint32_t previous = keys[k].vacate();
    if (!has_room(identity_bytes(k))) {
      sweep(a.now);
      if (!has_room(identity_bytes(k))) return {claim_status::full, 0, {}};
    }
    return keys[k].create(a, previous);
  }
  write complete(std::size_t k, std::uint32_t fence, std::uint32_t token) {
    key_model& m = keys[k];
    if (!m.holds(fence)) return write::refused;
    if (!fits(payload_size(token), payload_size(m.held.response) + payload_size(m.held.recovery))) {
      return write::full;
    }
    m.complete(fence, token);
    return write::applied;
  }
  write checkpoint(std::size_t k, std::uint32_t fence, std::uint32_t token,
                   tick_count lease_until) {
    key_model& m = keys[k];
    if (!m.holds(fence)) return write::refused;
    if (!fits(payload_size(token), payload_size(m.held.recovery))) return write::full;
    m.checkpoint(fence, token, lease_until);
    return write::applied;
  }
  bool release(std::size_t k, std::uint32_t fence) { return keys[k].release(fence); }
  std::optional<snapshot> find(std::size_t k, tick_count now) const { return keys[k].find(now); }
  std::size_t sweep(tick_count now) {
    std::size_t removed = 0;
    for (key_model& m : keys)
      removed += m.expire(now) ? 1 : 0;
    return removed;
  }
  std::vector<std::size_t> stuck(tick_count now) const {
    std::vector<std::size_t> out;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (keys[k].stuck(now)) out.push_back(k);
    }
    return out;
  }

 private:
  // Whether replacing old_size bytes of a record by new_size stays within max_bytes.
  bool fits(std::size_t new_size, std::size_t old_size) const {
    const std::size_t others = bytes() - old_size;
    return others <= max_bytes && new_size <= max_bytes - others;
  }
};

struct model_step {
  operation kind = operation::find;
  std::uint8_t key = 0;
  std::uint8_t fingerprint = 0;
  tick_count now = 0;
  tick_count lease = 0, retention = 0;  // claim
  std::uint32_t fence = 0;              // complete, release, checkpoint
  std::uint32_t token = 0;              // complete, checkpoint
  tick_count lease_until = 0;           // checkpoint
  std::uint32_t limit = 0;              // stuck
};

struct model_sequence {
  std::uint64_t seed = 0;
  std::size_t max_records = unbounded;
  std::size_t max_bytes = unbounded;
  std::vector<model_step> steps;
};

std::string limit_text(std::size_t limit) {
  return limit == unbounded ? "unbounded" : std::to_string(limit);
}

std::string describe(const model_step& s) {
  const auto& name = store_model::names[s.key];
  const std::string id = "\"" + std::string(name.scope) + "\"/\"" + std::string(name.key) + "\"";
  const std::string now = "now t" + std::to_string(s.now);
  switch (s.kind) {
    case operation::claim:
      return "claim(" + id + ", fp " + std::to_string(s.fingerprint) + ", " + now + ", lease " +
             std::to_string(s.lease) + ", retention " + std::to_string(s.retention) + ")";
    case operation::complete:
      return "complete(" + id + ", fence " + std::to_string(s.fence) + ", " +
             payload_text(s.token) + " (" + std::to_string(payload_size(s.token)) + " bytes), " +
             now + ")";
    case operation::release:
      return "release(" + id + ", fence " + std::to_string(s.fence) + ")";
    case operation::checkpoint:
      return "checkpoint(" + id + ", fence " + std::to_string(s.fence) + ", " +
             payload_text(s.token) + " (" + std::to_string(payload_size(s.token)) +
             " bytes), lease_until t" + std::to_string(s.lease_until) + ")";
    case operation::find:
      return "find(" + id + ", " + now + ")";
    case operation::sweep:
      return "sweep(" + now + ")";
    case operation::stuck:
      return "stuck(" + now + ", limit " + std::to_string(s.limit) + ")";
  }
  return "?";
}

std::string listing(const model_sequence& sequence) {
  std::string out = "store limits: max_records " + limit_text(sequence.max_records) +
                    ", max_bytes " + limit_text(sequence.max_bytes) + "\n";
  for (std::size_t i = 0; i < sequence.steps.size(); ++i)
    out += "  " + std::to_string(i) + ": " + describe(sequence.steps[i]) + "\n";
  return out;
}

constexpr tick_count short_lease = 5'000, long_lease = 30'000;
constexpr tick_count short_retention = 60'000, long_retention = 120'000;

// Applies a step to the model alone, as generate() does to choose what comes next.
void apply(store_model& model, const model_step& s) {
  switch (s.kind) {
    case operation::claim:
      model.claim(s.key, {s.fingerprint, s.now, s.lease, s.retention});
      break;
    case operation::complete:
      model.complete(s.key, s.fence, s.token);
      break;
    case operation::release:
      model.release(s.key, s.fence);
      break;
    case operation::checkpoint:
      model.checkpoint(s.key, s.fence, s.token, s.lease_until);
      break;
    case operation::sweep:
      model.sweep(s.now);
      break;
    case operation::find:
    case operation::stuck:
      break;
  }
}

// A random sequence that lands on lease and retention boundaries on purpose (now set to a live
// record's lease_until or expires_at, give or take a tick), sometimes steps time backwards (wall
// clocks of two processes disagree), and uses the fences the model says are current, stale or
// never granted.
model_sequence generate(std::uint64_t seed, std::size_t length = 200) {
  std::mt19937_64 random(seed);
  const auto below = [&](std::uint64_t n) { return static_cast<std::uint32_t>(random() % n); };
  model_sequence sequence;
  sequence.seed = seed;
  constexpr std::array<std::size_t, 6> record_limits{1, 2, 3, 4, 6, unbounded};
  constexpr std::array<std::size_t, 6> byte_limits{12, 40, 80, 160, unbounded, unbounded};
  sequence.max_records = record_limits[below(6)];
  sequence.max_bytes = byte_limits[below(6)];
  store_model model;
  model.max_records = sequence.max_records;
  model.max_bytes = sequence.max_bytes;
  tick_count now = 1'000'000;
  for (std::size_t i = 0; i < length; ++i) {
    const std::uint32_t when = below(100);
    if (when < 35) {
    } else if (when < 55) {
      now += 1 + below(2000);
    } else if (when < 72) {
      std::vector<tick_count> edges;
      for (const key_model& m : model.keys) {
        if (m.present) {
          edges.push_back(m.held.lease_until);
          edges.push_back(m.held.expires);
        }
      }
      if (!edges.empty()) now = edges[below(edges.size())] + below(3) - 1;
    } else if (when < 82) {
      now += below(2) == 0 ? short_lease : long_lease;
    } else if (when < 90) {
      now += below(2) == 0 ? short_retention : long_retention;
    } else if (when < 95) {
      now -= std::min<tick_count>(now, 1 + below(5000));
    } else {
      now += below(3 * long_retention);
    }

    model_step s;
    s.now = now;
    s.key = static_cast<std::uint8_t>(below(store_model::names.size()));
    const key_model& m = model.keys[s.key];
    const std::uint32_t choice = below(10);
    s.fence = m.present && choice < 6   ? m.held.fence
              : m.present && choice < 8 ? m.held.fence - 1
                                        : below(4);
    s.token = below(8) == 0 ? 0 : 1 + below(500);
    const std::uint32_t kind = below(100);
    if (kind < 30) {
      s.kind = operation::claim;
      s.fingerprint = below(4) == 0 ? 1 : 0;
      s.lease = below(2) == 0 ? short_lease : long_lease;
      s.retention = below(2) == 0 ? short_retention : long_retention;
    } else if (kind < 45) {
      s.kind = operation::complete;
    } else if (kind < 57) {
      s.kind = operation::checkpoint;
      const std::array<tick_count, 5> offsets{0, 1, short_lease, long_lease, 0};
      const std::uint32_t pick = below(5);
      s.lease_until = pick == 4 ? now - std::min<tick_count>(now, 1) : now + offsets[pick];
    } else if (kind < 65) {
      s.kind = operation::release;
    } else if (kind < 80) {
      s.kind = operation::find;
    } else if (kind < 90) {
      s.kind = operation::sweep;
    } else {
      s.kind = operation::stuck;
      s.limit = below(3) == 0 ? 100 : 1 + below(3);
    }
    apply(model, s);
    sequence.steps.push_back(s);
  }
  return sequence;
}

// How each field of a store's record differs from the model's snapshot ("" when none does).
std::string differences(const idem::record& actual, std::size_t k, const snapshot& expected,
                        naming rule = naming::required) {
  std::string out;
  const auto note = [&](std::string_view field, const std::string& want, const std::string& got) {
    if (want != got) {
      out += " ";
      out += field;
      out += ": expected " + want + ", got " + got + ";";
    }
  };
  const auto& name = store_model::names[k];
  if (!names_match(actual, name.scope, name.key, rule)) {
    note("scope", std::string(name.scope), actual.scope);
    note("key", std::string(name.key), actual.key);
  }
  note("fingerprint", fingerprint(expected.fingerprint).hex(), actual.fingerprint.hex());
  note("state", expected.completed ? "completed" : "in_progress",
       std::string(idem::to_string(actual.state)));
  note("fence", std::to_string(expected.fence), std::to_string(actual.fence));
  note("created_at", time_text(at(expected.created)), time_text(actual.created_at));
  note("lease_until", time_text(at(expected.lease_until)), time_text(actual.lease_until));
  note("expires_at", time_text(at(expected.expires)), time_text(actual.expires_at));
  note("response", payload_text(expected.response), payload_text(token_of(actual.response)));
  note("recovery", payload_text(expected.recovery), payload_text(token_of(actual.recovery)));
  return out;
}

std::string write_text(store_model::write w) {
  switch (w) {
    case store_model::write::refused:
      return "false";
    case store_model::write::applied:
      return "true";
    case store_model::write::full:
      return "store_error(full)";
  }
  return "?";
}

template <class Write>
store_model::write attempt(Write&& write) {
  try {
    return write() ? store_model::write::applied : store_model::write::refused;
  } catch (const idem::store_error& error) {
    if (error.failure() != idem::store_failure::full) throw;
    return store_model::write::full;
  }
}

// Runs one step on the store and the model; says how the store's answer differs ("" if not).
template <class S>
std::string run_step(S& store, store_model& model, const model_step& s) {
  const auto& name = store_model::names[s.key];
  try {
    switch (s.kind) {
      case operation::claim: {
        const claim_answer expected =
            model.claim(s.key, {s.fingerprint, s.now, s.lease, s.retention});
        const idem::claim_result actual =
            store.claim({name.scope, name.key, fingerprint(s.fingerprint), at(s.now),
                         tick * s.lease, tick * s.retention});
        if (actual.status != expected.status || actual.fence != expected.fence) {
          return "expected " + status_text(expected.status) + " fence " +
                 std::to_string(expected.fence) + ", got " + status_text(actual.status) +
                 " fence " + std::to_string(actual.fence);
        }
        if (expected.status == claim_status::taken_over ||
            expected.status == claim_status::existing) {
          const std::string diff =
              differences(actual.existing, s.key, expected.seen, naming::may_be_omitted);
          if (!diff.empty()) return "the claim's snapshot differs:" + diff;
        }
        return {};
      }
      case operation::complete:
      case operation::checkpoint: {
        const bool completing = s.kind == operation::complete;
        const store_model::write expected =
            completing ? model.complete(s.key, s.fence, s.token)
                       : model.checkpoint(s.key, s.fence, s.token, s.lease_until);
        const std::string bytes = payload(s.token);
        const store_model::write actual = attempt([&] {
          return completing
                     ? store.complete({name.scope, name.key, s.fence}, bytes, at(s.now))
                     : store.checkpoint({name.scope, name.key, s.fence}, bytes, at(s.lease_until));
        });
        if (actual != expected) {
          return "expected " + write_text(expected) + ", got " + write_text(actual);
        }
        return {};
      }
      case operation::release: {
        const bool expected = model.release(s.key, s.fence);
        const bool actual = store.release({name.scope, name.key, s.fence});
        if (actual != expected) {
          return "expected " + std::string(expected ? "true" : "false") + ", got " +
                 (actual ? "true" : "false");
        }
        return {};
      }
      case operation::find: {
        const std::optional<snapshot> expected = model.find(s.key, s.now);
        const std::optional<idem::record> actual = store.find(name.scope, name.key, at(s.now));
        if (expected.has_value() != actual.has_value()) {
          return expected ? "expected " + describe(*expected) + ", found nothing"
                          : "expected nothing, found " +
                                describe(snapshot_of(*actual, name.scope, name.key));
        }
        if (expected) {
          const std::string diff = differences(*actual, s.key, *expected);
          if (!diff.empty()) return "the record found differs:" + diff;
        }
        return {};
      }
      case operation::sweep: {
        const std::size_t expected = model.sweep(s.now);
        const std::size_t actual = store.sweep(at(s.now));
        if (actual != expected) {
          return "expected " + std::to_string(expected) + " removed, got " + std::to_string(actual);
        }
        return {};
      }
      case operation::stuck: {
        // Which records a limited listing picks is the store's business: compare as sets.
        const std::vector<std::size_t> expected = model.stuck(s.now);
        const std::vector<idem::record> actual = store.stuck(at(s.now), s.limit);
        const std::size_t want = std::min<std::size_t>(s.limit, expected.size());
        if (actual.size() != want) {
          return "expected " + std::to_string(want) + " records (of " +
                 std::to_string(expected.size()) + " stuck), got " + std::to_string(actual.size());
        }
        std::vector<bool> listed(store_model::names.size(), false);
        for (const idem::record& r : actual) {
          std::size_t k = 0;
          while (k < store_model::names.size() &&
                 (store_model::names[k].scope != r.scope || store_model::names[k].key != r.key)) {
            ++k;
          }
          if (k == store_model::names.size() ||
              std::find(expected.begin(), expected.end(), k) == expected.end()) {
            return "listed a record that is not stuck: \"" + r.scope + "\"/\"" + r.key + "\" " +
                   describe(snapshot_of(r, r.scope, r.key));
          }
          if (listed[k]) return "listed \"" + r.scope + "\"/\"" + r.key + "\" twice";
          listed[k] = true;
          const std::string diff = differences(r, k, model.keys[k].held);
          if (!diff.empty()) return "a listed record differs:" + diff;
        }
        return {};
      }
    }
  } catch (const std::exception& error) {
    return std::string("threw: ") + error.what();
  }
  return "?";
}

struct mismatch {
  std::size_t step;
  std::string what;
};

template <class S>
std::optional<mismatch> replay(const model_sequence& sequence) {
  S store = make_store<S>(sequence.max_records, sequence.max_bytes, 16);
  store_model model;
  model.max_records = sequence.max_records;
  model.max_bytes = sequence.max_bytes;
  for (std::size_t i = 0; i < sequence.steps.size(); ++i) {
    std::string what = run_step(store, model, sequence.steps[i]);
    if (!what.empty()) return mismatch{i, std::move(what)};
  }
  return std::nullopt;
}

// The failing sequence cut after its first mismatch, then without every step it can do without.
template <class S>
model_sequence shrink(model_sequence failing) {
  if (const std::optional<mismatch> first = replay<S>(failing)) {
    failing.steps.resize(first->step + 1);
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t i = failing.steps.size(); i-- > 0;) {
      model_sequence candidate = failing;
      candidate.steps.erase(candidate.steps.begin() + static_cast<std::ptrdiff_t>(i));
      if (replay<S>(candidate)) {
        failing = std::move(candidate);
        progress = true;
      }
    }
  }
  return failing;
}

// The first of `count` sequences from `first_seed` on which S answers otherwise than the model,
// shrunk, with what went wrong; "" when there is none.
template <class S>
std::string first_disagreement(std::uint64_t first_seed, int count) {
  for (int i = 0; i < count; ++i) {
    const model_sequence sequence = generate(first_seed + static_cast<std::uint64_t>(i));
    if (!replay<S>(sequence)) continue;
    const model_sequence small = shrink<S>(sequence);
    const mismatch failed = *replay<S>(small);
    std::string out = "seed " + std::to_string(sequence.seed) + ", shrunk from " +
                      std::to_string(sequence.steps.size()) + " steps to " +
                      std::to_string(small.steps.size()) + ":\n" + listing(small) + "step " +
                      std::to_string(failed.step) + ": " + failed.what + "\n";
    if constexpr (!std::is_same_v<S, idem::locked_store>) {
      const std::optional<mismatch> reference = replay<idem::locked_store>(small);
      out += reference ? "locked_store fails it too, at step " + std::to_string(reference->step) +
                             ": " + reference->what + "\n"
                       : "locked_store answers this sequence as the model does\n";
    }
    return out;
  }
  return {};
}

}  // namespace

// ---- part 1: concurrent stress, checked for linearizability --------------------------------

TEMPLATE_TEST_CASE(
    "store stress: eight threads of mixed operations on contended keys leave a linearizable "
    "history",
    "[concurrency]", IDEM_STRESS_STORES) {
  stress_shape shape;
  shape.operations_per_thread = scaled_down ? 100'000 : 1'000'000;
  shape.seed = 20260101;
  const auto started = std::chrono::steady_clock::now();
  const history h = run_stress(make_store<TestType>(unbounded, unbounded, 256), shape);
  const auto ran = std::chrono::steady_clock::now();
  const check_report report = check_history(h);
  const auto checked = std::chrono::steady_clock::now();
  const auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };

  INFO(shape.threads << " threads x " << shape.operations_per_thread << " operations on "
                     << shape.keys() << " keys, seed " << shape.seed << ": ran in "
                     << seconds(ran - started) << " s, checked in " << seconds(checked - ran)
                     << " s");
  INFO(coverage(report));
  INFO(report.failure);
  CHECK(report.invariants_hold);
  CHECK(report.linearizable);
  // The run exercised what it is for: takeovers after leases lapsed, new claims of released
  // and expired keys, sweeps that removed something, and fences refused.
  CHECK(report.claims[static_cast<std::size_t>(claim_status::taken_over)] > 0);
  CHECK(report.reclaimed > 0);
  CHECK(report.swept > 0);
  CHECK(report.completes_refused > 0);
  CHECK(report.completes_applied > 0);
  CHECK(report.releases_applied > 0);
  CHECK(report.checkpoints_applied > 0);
  CHECK(report.stuck_listed > 0);
}

TEST_CASE("store stress: the checker rejects a store that decides a claim before it applies it",
          "[concurrency]") {
  stress_shape shape;
  shape.operations_per_thread = 5'000;
  shape.keys_per_scope = 4;  // crowded, so that two claims meet in the window
  const check_report report = check_history(run_stress(check_then_act_store{}, shape));
  INFO(coverage(report));
  INFO(report.failure);
  CHECK_FALSE(report.linearizable);
}

TEST_CASE("store stress: the checker rejects a store whose complete ignores the fence",
          "[concurrency]") {
  stress_shape shape;
  shape.operations_per_thread = 5'000;
  const check_report report = check_history(run_stress(fence_blind_store{}, shape));
  INFO(coverage(report));
  INFO(report.failure);
  CHECK_FALSE(report.linearizable);
  CHECK_FALSE(report.invariants_hold);
}

TEST_CASE("store stress: the checker orders overlapping calls as real time allows", "[checker]") {
  // A find that returned before the overlapping claim did may still see that claim.
  history_builder b;
  const stress_shape& shape = b.h.shape;
  event found;
  found.invoked = 2;
  found.returned = 3;
  found.now = 11;
  found.outcome = 1;
  found.seen = {.fence = 1,
                .created = 10,
                .lease_until = 10 + shape.lease(),
                .expires = 10 + shape.retention()};
  event completed;
  completed.kind = operation::complete;
  completed.invoked = 4;
  completed.returned = 5;
  completed.now = 12;
  completed.fence = 1;
  completed.outcome = 1;
  event replayed = found;
  replayed.invoked = 7;
  replayed.returned = 8;
  replayed.now = 13;
  replayed.seen.completed = true;
  replayed.seen.response = 4;  // the payload of the complete invoked at 4
  b.add(claimed(1, 6, 10, 1)).add(found).add(completed).add(replayed);
  const check_report accepted = check_history(b.h);
  INFO(accepted.failure);
  CHECK(accepted.linearizable);
  CHECK(accepted.invariants_hold);

  // The same find, but returned before the claim was invoked: no order explains it.
  b.h.events[1].invoked = 1;
  b.h.events[1].returned = 2;
  b.h.events[0].invoked = 3;
  CHECK_FALSE(check_history(b.h).linearizable);
}

TEST_CASE("store stress: the checker rejects two overlapping claims that both won a free key",
          "[checker]") {
  history_builder b;
  b.add(claimed(1, 4, 10, 1)).add(claimed(2, 3, 11, 1));
  const check_report report = check_history(b.h);
  INFO(report.failure);
  CHECK_FALSE(report.linearizable);
}

TEST_CASE("store stress: the checker lets a fence restart at 1 only after a sweep forgot the key",
          "[checker]") {
  history_builder b;
  const tick_count retention = b.h.shape.retention();
  event sweep;
  sweep.kind = operation::sweep;
  sweep.invoked = 3;
  sweep.returned = 4;
  sweep.now = 10 + retention;
  sweep.fence = 1;
  b.add(claimed(1, 2, 10, 1)).add(sweep).add(claimed(5, 6, 11 + retention, 1));
  const check_report forgotten = check_history(b.h);
  INFO(forgotten.failure);
  CHECK(forgotten.linearizable);

  // Without the sweep the expired record is still there, and its replacement gets fence 2.
  b.h.events[1].kind = operation::find;
  b.h.events[1].outcome = 0;
  CHECK_FALSE(check_history(b.h).linearizable);
  b.h.events[2].fence = 2;
  CHECK(check_history(b.h).linearizable);
}

// ---- part 2: random sequences against the model, field by field ----------------------------

TEMPLATE_TEST_CASE(
    "store model: 2000 seeded random sequences get the per-key model's answers, field by field", "",
    IDEM_STRESS_STORES) {
  const std::string disagreement = first_disagreement<TestType>(20260101, 2000);
  INFO(disagreement);
  CHECK(disagreement.empty());
}

TEST_CASE("store model: the comparison catches a store whose complete ignores the fence", "") {
  CHECK_FALSE(first_disagreement<fence_blind_store>(20260101, 200).empty());
}

// ---- part 3: a holder paused past its lease, on its own thread -----------------------------

TEMPLATE_TEST_CASE(
    "store stress: a holder paused past its lease loses every write to the thread that took "
    "over",
    "[concurrency]", IDEM_STRESS_STORES) {
  TestType store = make_store<TestType>();
  const store_time now = conformance::start();
  std::mutex mutex;
  std::condition_variable changed;
  bool holding = false, resume = false;
  idem::claim_result first;
  bool completed = true, checkpointed = true, released = true;

  std::thread paused([&, store]() mutable {
    first = store.claim(conformance::ask("tenant", "key", conformance::print(1), now));
    {
      const std::lock_guard lock(mutex);
      holding = true;
    }
    changed.notify_all();
    {
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return resume; });
    }
    // Woken long after its lease: each write is under the fence it was taken over from.
    const idem::fenced_key stale{"tenant", "key", first.fence};
    const store_time late = now + conformance::lease + 5s;
    completed = store.complete(stale, "paused holder's response", late);
    checkpointed = store.checkpoint(stale, "paused holder's recovery", late + conformance::lease);
    released = store.release(stale);
  });
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return holding; });
  }
  REQUIRE(first.status == claim_status::claimed);

  idem::claim_result taken;
  bool taker_completed = false;
  std::thread taker([&, store]() mutable {
    const store_time later = now + conformance::lease;
    taken = store.claim(conformance::ask("tenant", "key", conformance::print(1), later));
    if (taken.status == claim_status::taken_over) {
      taker_completed = store.complete({"tenant", "key", taken.fence}, "taker's response", later);
    }
  });
  taker.join();
  REQUIRE(taken.status == claim_status::taken_over);
  CHECK(taken.fence == first.fence + 1);
  CHECK(taker_completed);

  {
    const std::lock_guard lock(mutex);
    resume = true;
  }
  changed.notify_all();
  paused.join();
  CHECK_FALSE(completed);
  CHECK_FALSE(checkpointed);
  CHECK_FALSE(released);
  const std::optional<idem::record> found =
      store.find("tenant", "key", now + conformance::lease + 10s);
  REQUIRE(found);
  CHECK(found->state == idem::record_state::completed);
  CHECK(found->fence == taken.fence);
  CHECK(found->response == "taker's response");
}

#undef IDEM_STRESS_STORES
