// The store's operations as Redis sees them, apart from how they travel: the script calls each
// operation sends (its keys and arguments), the decoding of what the scripts answer, and sweep
// and stuck as walks of round trips. redis_store (blocking, through hiredis) and
// async_redis_store (pipelined, on Asio) both run them, so the two write the same records under
// the same keys and can share one database.
//
// An operation's call is given `send`, which sends its commands (views into strings that live
// until send returns) and answers what the caller wants: the replies for the blocking store,
// the commands written out for the asynchronous one. A walk hands out one step at a time (script
// calls or plain commands, sent in one round trip) and is fed that step's replies, until its
// step is done.
#ifndef IDEM_STORE_REDIS_OPERATIONS_HPP
#define IDEM_STORE_REDIS_OPERATIONS_HPP

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/store/contract.hpp>
#include <idem/store/redis/command.hpp>
#include <idem/store/redis/keys.hpp>
#include <idem/store/redis/reply.hpp>
#include <idem/store/redis/scripts.hpp>

namespace idem {

/// Whose clock leases and expiry follow.
enum class redis_time : std::uint8_t {
  server,  // the Redis server's (TIME in the scripts): clients with skewed clocks agree
  caller,  // the `now` each operation is given: tests with a manual clock, replays of time
};

}  // namespace idem

namespace idem::detail {

// What the records' keys and the scripts' arguments depend on, and how long a write waits for
// replicas: the options of that name, whose comments (redis_store::options) say what each is.
struct redis_record_settings {
  std::string prefix;
  redis_time time = redis_time::server;
  std::chrono::milliseconds caller_time_margin{};
  std::size_t max_records_per_scope = std::numeric_limits<std::size_t>::max();
  std::size_t replicas = 0;
  std::chrono::milliseconds replica_timeout{1000};
  // redis_cluster_store: one scope registry per hash slot (keys.hpp), in the slot of the scopes
  // it names, instead of the one P#scopes: a claim's enrolment then goes to the node of its
  // record, and a registry moves with its slot.
  bool slot_registries = false;
};

// The most replicas a write may wait for: more than any deployment has, and what keeps the
// count a small decimal.
inline constexpr std::size_t redis_max_replicas = 1000;

// What no part checks alone, for every store that waits for replicas: WAIT must end before the
// exchange's own timeout does, or a replica that is slow would read as a server that is gone.
inline void redis_check_replica_timeout(const std::string& who, std::size_t replicas,
                                        std::chrono::milliseconds replica_timeout,
                                        std::chrono::milliseconds command_timeout) {
  if (replicas > 0 && replica_timeout >= command_timeout) {
    throw std::invalid_argument(
        who + ": replica_timeout (" + std::to_string(replica_timeout.count()) +
        " ms) must be shorter than command_timeout (" + std::to_string(command_timeout.count()) +
        " ms), which the WAIT is part of");
  }
}

// One round trip of a walk: script calls or plain commands (never both); none when it is over.
struct redis_step {
  std::span<const redis_command> scripts;
  std::span<const std::vector<std::string_view>> plain;
  bool done() const noexcept { return scripts.empty() && plain.empty(); }
};

class redis_operations {
 public:
  // Refuses a prefix that would move the hash tag and a negative margin; `who` begins every
  // message, `where` names the server in them.
  redis_operations(redis_record_settings settings, std::string who, std::string where)
      : settings_(checked(std::move(settings), who)),
        who_(std::move(who)),
        where_(std::move(where)),
        registry_(redis_registry_of(settings_.prefix)),
        wait_replicas_(redis_decimal(settings_.replicas)),
        wait_timeout_(redis_decimal(settings_.replica_timeout.count())),
        wait_words_{"WAIT", wait_replicas_, wait_timeout_},
        publish_words_{"PUBLISH", registry_, ""},
        after_claim_{std::span<const std::string_view>(publish_words_),
                     std::span<const std::string_view>(wait_words_)} {}
  redis_operations(const redis_operations&) = delete;
  redis_operations& operator=(const redis_operations&) = delete;
  ~redis_operations() = default;

  const redis_record_settings& settings() const noexcept { return settings_; }
  const std::string& registry() const noexcept { return registry_; }
  // The registry that names the scope of `tag`: registry(), or with slot_registries the one of
  // the tag's slot (written into `storage`).
  std::string_view registry_of(std::string_view tag, std::string& storage) const {
    if (!settings_.slot_registries) return registry_;
    storage = redis_slot_registry(settings_.prefix, redis_tag_slot(tag));
    return storage;
  }
  // The registry of `slot`, with slot_registries.
  std::string slot_registry(std::uint16_t slot) const {
    return redis_slot_registry(settings_.prefix, slot);
  }
  const std::string& who() const noexcept { return who_; }

  template <class Send>
  decltype(auto) claim(const claim_request& request, Send&& send) const {
    if (request.lease <= std::chrono::nanoseconds::zero() ||
        request.retention <= std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument(who_ + ": lease and retention must be positive");
    }
    const redis_keys names = keys_of(request.scope, request.key);
    const std::string now = now_argument(request.now);
    const std::string lease = redis_decimal(request.lease.count());
    const std::string retention = redis_decimal(request.retention.count());
    const std::string extra = redis_decimal(extra_ttl_ms());
    const std::string cap = scope_cap();
    std::string registry;
    const std::string_view fingerprint{reinterpret_cast<const char*>(request.fingerprint.data()),
                                       request.fingerprint.size()};
    const redis_command commands[] = {
        redis_command{
            redis_script::claim,
            {names.record, names.expiry, names.lease},
            {now, lease, retention, fingerprint, request.key, extra, cap, request.recovery}},
        redis_command{redis_script::enroll, {registry_of(names.tag, registry)}, {names.tag}},
    };
    return send(std::span<const redis_command>(commands));
  }

  // The answer to claim's two commands: the claim script's, then the scope's enrolment.
  claim_result claim_result_of(const std::vector<redis_reply>& replies) const {
    const redisReply* answer = replies.at(0).get();
    if (is_error(answer)) {
      if (is_out_of_memory(answer)) return {claim_status::full, 0, {}};
      throw failure("claim", answer);
    }
    if (answer->type != REDIS_REPLY_ARRAY || answer->elements < 2 ||
        answer->element[0]->type != REDIS_REPLY_INTEGER) {
      throw malformed("claim");
    }
    const long long status = answer->element[0]->integer;
    // The registry's answer matters only when this claim made a new record: any other answer
    // found its scope enrolled already.
    if (status == 0 && is_error(replies.at(1).get())) {
      throw failure(
          "claim (registering the scope; the record was written but may be missed "
          "by sweep and stuck until claimed again)",
          replies[1].get());
    }
    claim_result result;
    switch (status) {
      case 0:
        result.status = claim_status::claimed;
        result.fence = redis_fence_of(answer->element[1]);
        return result;
      case 1: {
        if (answer->elements < 7) throw malformed("claim");
        result.status = claim_status::taken_over;
        result.fence = redis_fence_of(answer->element[1]);
        record& taken = result.existing;
        taken.fingerprint = redis_digest_of(answer->element[2]);
        taken.state = record_state::in_progress;
        taken.fence = result.fence;
        taken.created_at = redis_time_of(answer->element[3]);
        taken.lease_until = redis_time_of(answer->element[4]);
        taken.expires_at = redis_time_of(answer->element[5]);
        taken.recovery = reply_text(answer->element[6]);
        return result;
      }
      case 2:
        if (answer->elements < 9) throw malformed("claim");
        result.status = claim_status::existing;
        result.existing = redis_record_of(std::span(answer->element + 1, 8));
        return result;
      case 3:
        result.status = claim_status::full;
        return result;
      default:
        throw malformed("claim");
    }
  }

  template <class Send>
  decltype(auto) complete(const fenced_key& held, std::string_view response, Send&& send) const {
    const redis_keys names = keys_of(held.scope, held.key);
    const std::string fence = redis_decimal(held.fence);
    const redis_command commands[] = {redis_command{
        redis_script::complete, {names.record, names.lease}, {fence, response, held.key}}};
    return send(std::span<const redis_command>(commands));
  }

  template <class Send>
  decltype(auto) release(const fenced_key& held, Send&& send) const {
    const redis_keys names = keys_of(held.scope, held.key);
    const std::string fence = redis_decimal(held.fence);
    const redis_command commands[] = {
        redis_command{redis_script::release, {names.record, names.lease}, {fence, held.key}}};
    return send(std::span<const redis_command>(commands));
  }

  // With redis_time::server, `lease_until` is read as a duration from this machine's clock
  // (lease_until - system_clock::now()) and added to the server's time.
  template <class Send>
  decltype(auto) checkpoint(const fenced_key& held, std::string_view recovery,
                            store_time lease_until, Send&& send) const {
    const redis_keys names = keys_of(held.scope, held.key);
    const std::string fence = redis_decimal(held.fence);
    std::string until;
    std::string extension = "0";
    if (settings_.time == redis_time::caller) {
      until = redis_time_argument(lease_until);
    } else {
      const auto ahead = std::chrono::duration_cast<std::chrono::nanoseconds>(
          lease_until - std::chrono::system_clock::now());
      extension = redis_decimal(std::max<std::int64_t>(ahead.count(), 0));
    }
    const redis_command commands[] = {redis_command{redis_script::checkpoint,
                                                    {names.record, names.lease},
                                                    {fence, recovery, until, extension, held.key}}};
    return send(std::span<const redis_command>(commands));
  }

  // What follows the script calls of claim, complete, release and checkpoint in the same round
  // trip, on the same connection, when writes wait for replicas (nothing when they do not):
  // WAIT replicas timeout. WAIT is documented to wait for the writes of its own connection. A
  // claim that answers an existing record writes nothing, and the record it read may have been
  // written a moment ago on another connection, on no replica yet: a replay of it could be lost
  // in a failover after its caller was given it. Redis 7.0 in fact records the offset after every
  // command, read-only ones too (so WAIT alone waits for the record there), but that is not its
  // contract, so a claim also sends PUBLISH to a channel nobody reads before its WAIT: a PUBLISH
  // is replicated, which makes it a write of this connection at the current offset.
  std::span<const std::span<const std::string_view>> wait_for_replicas(bool claim) const noexcept {
    if (settings_.replicas == 0) return {};
    return claim ? std::span<const std::span<const std::string_view>>(after_claim_)
                 : std::span<const std::span<const std::string_view>>(after_claim_).last(1);
  }

  // The replies of an operation sent with wait_for_replicas(claim), the replies of the commands
  // it added taken off the end and WAIT's checked: fewer replicas than asked is
  // store_error(unavailable), ambiguous as a timeout (the write applied at the primary, and may
  // or may not survive its failover). A script that failed wrote nothing, so WAIT's answer does
  // not matter then: the script's error is the one the operation's decoding reports.
  std::vector<redis_reply> replicated(std::vector<redis_reply> replies, const char* operation,
                                      bool claim) const {
    const std::size_t added = wait_for_replicas(claim).size();
    if (added == 0) return replies;
    if (replies.size() <= added) throw malformed(operation);
    const redis_reply acknowledged = std::move(replies.back());
    replies.resize(replies.size() - added);
    if (std::any_of(replies.begin(), replies.end(),
                    [](const redis_reply& reply) { return is_error(reply.get()); })) {
      return replies;
    }
    check_replicated(acknowledged.get(), operation);
    return replies;
  }

  // WAIT's answer to a write that applied: fewer replicas than asked is
  // store_error(unavailable).
  void check_replicated(const redisReply* acknowledged, const char* operation) const {
    if (is_error(acknowledged)) {
      throw store_error(
          store_failure::unavailable,
          who_ + ": " + operation + " was sent, but the server at " + where_ +
              " refused to WAIT for replicas: " + std::string(reply_text(acknowledged)) +
              "; the write may or may not survive a failover");
    }
    if (acknowledged->type != REDIS_REPLY_INTEGER) throw malformed(operation);
    if (acknowledged->integer < static_cast<long long>(settings_.replicas)) {
      throw store_error(store_failure::unavailable,
                        who_ + ": " + operation + " applied at the server at " + where_ +
                            ", but only " + std::to_string(acknowledged->integer) + " of the " +
                            std::to_string(settings_.replicas) +
                            " replicas asked for acknowledged it within " +
                            std::to_string(settings_.replica_timeout.count()) +
                            " ms; it may or may not survive a failover");
    }
  }

  // The answer of complete, release and checkpoint: whether the fenced write applied.
  bool applied(const std::vector<redis_reply>& replies, const char* operation) const {
    const redisReply* answer = replies.at(0).get();
    if (is_error(answer)) throw failure(operation, answer);
    if (answer->type != REDIS_REPLY_INTEGER) throw malformed(operation);
    return answer->integer == 1;
  }

  template <class Send>
  decltype(auto) find(std::string_view scope, std::string_view key, store_time now,
                      Send&& send) const {
    const redis_keys names = keys_of(scope, key);
    const std::string when = now_argument(now);
    const redis_command commands[] = {redis_command{redis_script::find, {names.record}, {when}}};
    return send(std::span<const redis_command>(commands));
  }

  std::optional<record> found(const std::vector<redis_reply>& replies, std::string_view scope,
                              std::string_view key) const {
    const redisReply* answer = replies.at(0).get();
    if (is_error(answer)) throw failure("find", answer);
    if (answer->type == REDIS_REPLY_NIL) return std::nullopt;
    if (answer->type != REDIS_REPLY_ARRAY || answer->elements < 8) throw malformed("find");
    record out = redis_record_of(std::span(answer->element, 8));
    out.scope = scope;
    out.key = key;
    return out;
  }

  redis_scope_keys scope_keys_of(std::string_view tag) const {
    return redis_scope_keys_of(settings_.prefix, tag);
  }

  // A time argument of the scripts: empty (the server's TIME) with redis_time::server.
  std::string now_argument(store_time now) const {
    if (settings_.time == redis_time::server) return {};
    return redis_time_argument(now);
  }

  static bool is_error(const redisReply* reply) noexcept {
    return reply->type == REDIS_REPLY_ERROR;
  }
  static bool is_out_of_memory(const redisReply* reply) noexcept {
    return reply_text(reply).starts_with("OOM");
  }

  store_error failure(const char* operation, const redisReply* reply) const {
    const std::string text(reply_text(reply));
    return store_error(
        is_out_of_memory(reply) ? store_failure::full : store_failure::unavailable,
        who_ + ": " + operation + " failed: the server at " + where_ + " answered: " + text);
  }
  store_error malformed(const char* operation) const {
    return store_error(store_failure::unavailable,
                       who_ + ": " + operation + ": unexpected answer from " + where_);
  }

  // One page of the scope registry's SSCAN: the next cursor ("0" after the last page), and the
  // page's tags in `tags`.
  std::string scope_page_of(const std::vector<redis_reply>& replies,
                            std::vector<std::string>& tags) const {
    const redisReply* page = replies.at(0).get();
    if (is_error(page)) throw failure("listing scopes", page);
    if (page->type != REDIS_REPLY_ARRAY || page->elements != 2 ||
        page->element[1]->type != REDIS_REPLY_ARRAY) {
      throw malformed("listing scopes");
    }
    tags.clear();
    tags.reserve(page->element[1]->elements);
    for (std::size_t i = 0; i < page->element[1]->elements; ++i) {
      tags.emplace_back(reply_text(page->element[1]->element[i]));
    }
    return std::string(reply_text(page->element[0]));
  }

 private:
  static redis_record_settings checked(redis_record_settings given, const std::string& who) {
    if (given.prefix.find_first_of("{}") != std::string::npos) {
      throw std::invalid_argument(
          who +
          ": the key prefix may not contain '{' or '}': they would move the hash tag that keeps "
          "a record's keys in one cluster slot");
    }
    if (given.caller_time_margin < std::chrono::milliseconds::zero()) {
      throw std::invalid_argument(who + ": caller_time_margin cannot be negative");
    }
    if (given.replicas > redis_max_replicas) {
      throw std::invalid_argument(who + ": replicas is " + std::to_string(given.replicas) +
                                  "; at most " + std::to_string(redis_max_replicas) +
                                  " replicas can be waited for");
    }
    // WAIT's timeout 0 means "wait forever": a write would block as long as a replica is
    // down, so a positive timeout is required whenever writes wait.
    if (given.replicas > 0 && given.replica_timeout <= std::chrono::milliseconds::zero()) {
      throw std::invalid_argument(
          who +
          ": replica_timeout must be positive when replicas is not 0 (WAIT with a "
          "timeout of 0 would wait forever for a replica that is down)");
    }
    return given;
  }

  redis_keys keys_of(std::string_view scope, std::string_view key) const {
    return redis_keys_of(settings_.prefix, scope, key);
  }

  std::string scope_cap() const {
    const std::size_t cap = settings_.max_records_per_scope;
    return cap == std::numeric_limits<std::size_t>::max() ? std::string() : redis_decimal(cap);
  }

  std::int64_t extra_ttl_ms() const {
    return settings_.time == redis_time::caller ? settings_.caller_time_margin.count() : 0;
  }

  redis_record_settings settings_;
  std::string who_;
  std::string where_;
  std::string registry_;
  std::string wait_replicas_;
  std::string wait_timeout_;
  std::string_view wait_words_[3];     // WAIT replicas timeout, views of the two above
  std::string_view publish_words_[3];  // PUBLISH registry "": a replicated write of no key
  std::span<const std::string_view> after_claim_[2];  // PUBLISH, WAIT
};

// A registry's SSCAN, one page from `cursor`.
inline std::vector<std::string_view> redis_scope_scan(std::string_view registry,
                                                      const std::string& cursor) {
  return {"SSCAN", registry, cursor, "COUNT", "256"};
}

// One page of the scope registry as a walk reads it (SSCAN's cursor and scope tags), and the
// pipelined round of a script over the page's scopes.
struct redis_scope_page {
  std::string cursor = "0";
  std::vector<std::string> tags;
  std::vector<redis_scope_keys> scopes;
  std::vector<redis_command> commands;

  // Reads SSCAN's answer; false when the page named no scope, else the round's commands are
  // `script(scope)` for each scope of the page, in order.
  template <class Script>
  bool read(const redis_operations& operations, const std::vector<redis_reply>& replies,
            Script script) {
    cursor = operations.scope_page_of(replies, tags);
    if (tags.empty()) return false;
    scopes.clear();
    commands.clear();
    for (const std::string& tag : tags)
      scopes.push_back(operations.scope_keys_of(tag));
    for (const redis_scope_keys& scope : scopes)
      commands.push_back(script(scope));
    return true;
  }
};

// sweep(now): for each page of the scope registry (SSCAN: a scope may come twice), one
// pipelined round of the sweep script for the page's scopes, then any scope with more due
// followed alone, batch by batch; then the scopes whose index was empty leave the registry,
// unless a claim wrote into one meanwhile: removed first, then its index counted (both in one
// round trip, in that order), then put back if not empty. A claim enrolls its scope after
// writing its record, so however the two interleave, a scope with a record ends up enrolled.
// Not movable: a step's views point into it.
class redis_sweep_walk {
 public:
  static constexpr std::size_t batch = 512;

  // Over `registry` (the store's one registry when empty).
  redis_sweep_walk(const redis_operations& operations, store_time now,
                   std::string_view registry = {})
      : operations_(operations),
        when_(operations.now_argument(now)),
        registry_(registry.empty() ? operations.registry() : std::string(registry)) {}
  redis_sweep_walk(const redis_sweep_walk&) = delete;
  redis_sweep_walk& operator=(const redis_sweep_walk&) = delete;
  ~redis_sweep_walk() = default;

  // Records removed so far: those deleted, and those Redis's TTL had dropped whose index
  // entries went.
  std::size_t removed() const noexcept { return removed_; }

  redis_step next() {
    switch (phase_) {
      case phase::scan:
        plain_ = {redis_scope_scan(registry_, page_.cursor)};
        return {{}, plain_};
      case phase::round:
        return {page_.commands, {}};
      case phase::follow: {
        const following& scope = follow_.front();
        offset_ = redis_decimal(scope.offset);
        page_.commands.clear();
        page_.commands.push_back(script(page_.scopes[scope.index], offset_));
        return {page_.commands, {}};
      }
      case phase::forget:
      case phase::put_back:
        return {{}, plain_};
      case phase::done:
        break;
    }
    return {};
  }

  void feed(std::vector<redis_reply> replies) {
    switch (phase_) {
      case phase::scan:
        if (!page_.read(operations_, replies,
                        [this](const redis_scope_keys& scope) { return script(scope, zero_); })) {
          return next_page();
        }
        phase_ = phase::round;
        return;
      case phase::round:
        for (std::size_t i = 0; i < page_.scopes.size(); ++i) {
          const answer swept = answer_of(replies.at(i).get());
          removed_ += swept.removed;
          if (swept.seen == batch) {
            follow_.push_back({i, swept.kept});
          } else if (swept.left == 0) {
            empty_.push_back(i);
          }
        }
        return follow_.empty() ? forget() : void(phase_ = phase::follow);
      case phase::follow: {
        const answer swept = answer_of(replies.at(0).get());
        removed_ += swept.removed;
        following& scope = follow_.front();
        scope.offset += swept.kept;
        if (swept.seen == batch) return;
        if (swept.left == 0) empty_.push_back(scope.index);
        follow_.erase(follow_.begin());
        return follow_.empty() ? forget() : void();
      }
      case phase::forget: {
        std::vector<std::vector<std::string_view>> back;
        for (std::size_t i = 0; i < empty_.size(); ++i) {
          const redisReply* left = replies.at(2 * i + 1).get();
          if (redis_operations::is_error(left)) throw operations_.failure("sweep", left);
          if (left->type == REDIS_REPLY_INTEGER && left->integer == 0) continue;
          back.push_back({"SADD", registry_, page_.tags[empty_[i]]});
        }
        if (back.empty()) return next_page();
        plain_ = std::move(back);
        phase_ = phase::put_back;
        return;
      }
      case phase::put_back:
        for (const redis_reply& reply : replies) {
          if (redis_operations::is_error(reply.get())) {
            throw operations_.failure("sweep", reply.get());
          }
        }
        return next_page();
      case phase::done:
        return;
    }
  }

 private:
  enum class phase : std::uint8_t { scan, round, follow, forget, put_back, done };
  struct following {
    std::size_t index;
    std::size_t offset;
  };
  struct answer {
    std::size_t removed = 0;
    std::size_t seen = 0;
    std::size_t kept = 0;
    std::size_t left = 0;
  };

  redis_command script(const redis_scope_keys& scope, const std::string& from) const {
    return redis_command{redis_script::sweep,
                         {scope.expiry, scope.lease},
                         {when_, batch_, from, scope.record_prefix}};
  }

  answer answer_of(const redisReply* reply) const {
    if (redis_operations::is_error(reply)) throw operations_.failure("sweep", reply);
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 4) {
      throw operations_.malformed("sweep");
    }
    return answer{static_cast<std::size_t>(reply->element[0]->integer),
                  static_cast<std::size_t>(reply->element[1]->integer),
                  static_cast<std::size_t>(reply->element[2]->integer),
                  static_cast<std::size_t>(reply->element[3]->integer)};
  }

  void forget() {
    if (empty_.empty()) return next_page();
    plain_.clear();
    for (const std::size_t i : empty_) {
      plain_.push_back({"SREM", registry_, page_.tags[i]});
      plain_.push_back({"ZCARD", page_.scopes[i].expiry});
    }
    phase_ = phase::forget;
  }

  void next_page() {
    follow_.clear();
    empty_.clear();
    phase_ = page_.cursor == "0" ? phase::done : phase::scan;
  }

  const redis_operations& operations_;
  const std::string when_;
  const std::string registry_;
  const std::string batch_ = redis_decimal(batch);
  const std::string zero_ = "0";
  phase phase_ = phase::scan;
  redis_scope_page page_;
  std::string offset_;
  std::vector<std::vector<std::string_view>> plain_;
  std::vector<following> follow_;
  std::vector<std::size_t> empty_;
  std::size_t removed_ = 0;
};

// stuck(now, limit): for each page of the scope registry, one pipelined round of the stuck
// script for the page's scopes, each scope's answer taken in order and a scope with more
// followed alone before the next; it stops as soon as `limit` records are found. Reads only.
// Not movable: a step's views point into it.
class redis_stuck_walk {
 public:
  static constexpr std::size_t batch = 256;

  // Over `registry` (the store's one registry when empty).
  redis_stuck_walk(const redis_operations& operations, store_time now, std::size_t limit,
                   std::string_view registry = {})
      : operations_(operations),
        when_(operations.now_argument(now)),
        registry_(registry.empty() ? operations.registry() : std::string(registry)),
        limit_(limit) {
    if (limit_ == 0) phase_ = phase::done;
  }
  redis_stuck_walk(const redis_stuck_walk&) = delete;
  redis_stuck_walk& operator=(const redis_stuck_walk&) = delete;
  ~redis_stuck_walk() = default;

  // What it found, once done.
  std::vector<record> take() noexcept { return std::move(out_); }

  redis_step next() {
    switch (phase_) {
      case phase::scan:
        plain_ = {redis_scope_scan(registry_, page_.cursor)};
        return {{}, plain_};
      case phase::round:
        return {page_.commands, {}};
      case phase::follow:
        from_ = redis_decimal(offset_);
        page_.commands.clear();
        page_.commands.push_back(script(page_.scopes[at_], from_));
        return {page_.commands, {}};
      case phase::done:
        break;
    }
    return {};
  }

  void feed(std::vector<redis_reply> replies) {
    switch (phase_) {
      case phase::scan:
        if (!page_.read(operations_, replies,
                        [this](const redis_scope_keys& scope) { return script(scope, zero_); })) {
          return next_page();
        }
        phase_ = phase::round;
        return;
      case phase::round:
        round_ = std::move(replies);
        at_ = 0;
        return take_round();
      case phase::follow: {
        const std::size_t seen = take(replies.at(0).get());
        offset_ += seen;
        if (seen == batch && out_.size() < limit_) return;
        ++at_;
        return take_round();
      }
      case phase::done:
        return;
    }
  }

 private:
  enum class phase : std::uint8_t { scan, round, follow, done };

  redis_command script(const redis_scope_keys& scope, const std::string& from) const {
    return redis_command{
        redis_script::stuck, {scope.lease}, {when_, batch_, from, scope.record_prefix}};
  }

  // Takes the round's answers from scope at_ on, until one needs following or `limit` is met.
  void take_round() {
    for (; at_ < page_.tags.size() && out_.size() < limit_; ++at_) {
      scope_ = redis_scope_of_tag(page_.tags[at_]);
      const std::size_t seen = take(round_.at(at_).get());
      if (seen == batch && out_.size() < limit_) {
        offset_ = seen;
        phase_ = phase::follow;
        return;
      }
    }
    next_page();
  }

  // Adds the stuck records of one script answer (up to `limit`); answers how many index
  // entries the script looked at.
  std::size_t take(const redisReply* reply) {
    if (redis_operations::is_error(reply)) throw operations_.failure("stuck", reply);
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 || (reply->elements - 1) % 7 != 0) {
      throw operations_.malformed("stuck");
    }
    for (std::size_t at = 1; at + 7 <= reply->elements && out_.size() < limit_; at += 7) {
      record found;
      found.scope = scope_;
      found.key = reply_text(reply->element[at]);
      found.fence = redis_fence_of(reply->element[at + 1]);
      found.state = record_state::in_progress;
      found.fingerprint = redis_digest_of(reply->element[at + 2]);
      found.created_at = redis_time_of(reply->element[at + 3]);
      found.lease_until = redis_time_of(reply->element[at + 4]);
      found.expires_at = redis_time_of(reply->element[at + 5]);
      found.recovery = reply_text(reply->element[at + 6]);
      out_.push_back(std::move(found));
    }
    return static_cast<std::size_t>(reply->element[0]->integer);
  }

  void next_page() {
    phase_ = page_.cursor == "0" || out_.size() >= limit_ ? phase::done : phase::scan;
  }

  const redis_operations& operations_;
  const std::string when_;
  const std::string registry_;
  const std::size_t limit_;
  const std::string batch_ = redis_decimal(batch);
  const std::string zero_ = "0";
  phase phase_ = phase::scan;
  redis_scope_page page_;
  std::string from_;
  std::string scope_;
  std::size_t at_ = 0;
  std::size_t offset_ = 0;
  std::vector<std::vector<std::string_view>> plain_;
  std::vector<redis_reply> round_;  // the round's answers, taken one scope at a time
  std::vector<record> out_;
};

// Runs a walk to its end on a client that blocks: `send(step)` answers the step's replies.
template <class Walk, class Send>
void redis_walk(Walk& walk, Send&& send) {
  for (redis_step step = walk.next(); !step.done(); step = walk.next())
    walk.feed(send(step));
}

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_OPERATIONS_HPP
