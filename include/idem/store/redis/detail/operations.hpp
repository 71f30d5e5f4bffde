// The store's operations as Redis sees them, apart from how they travel: the script calls each
// operation sends (its keys and arguments) and the decoding of what the scripts answer (sweep and
// stuck, walks of round trips, are in walks.hpp). redis_store (blocking, through hiredis) and
// async_redis_store (pipelined, on Asio) both run them, so the two write the same records under
// the same keys and can share one database.
//
// An operation's call is given `send`, which sends its commands (views into strings that live
// until send returns) and answers what the caller wants: the replies for the blocking store,
// the commands written out for the asynchronous one.
#ifndef IDEM_STORE_REDIS_DETAIL_OPERATIONS_HPP
#define IDEM_STORE_REDIS_DETAIL_OPERATIONS_HPP

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
#include <idem/store/redis/detail/command.hpp>
#include <idem/store/redis/detail/keys.hpp>
#include <idem/store/redis/detail/reply.hpp>
#include <idem/store/redis/detail/scripts.hpp>
#include <idem/store/time_source.hpp>

namespace idem::detail {

// What the records' keys and the scripts' arguments depend on, and how long a write waits for
// replicas: the options of that name, whose comments (redis_store::options) say what each is.
struct redis_record_settings {
  std::string prefix;
  time_source clock = time_source::server;
  std::chrono::milliseconds caller_time_margin{};
  std::size_t max_records_per_scope = std::numeric_limits<std::size_t>::max();
  std::size_t replicas = 0;
  std::chrono::milliseconds replica_timeout{1000};
  // redis_cluster_store: one scope registry per hash slot (keys.hpp), in the slot of the scopes
  // it names, instead of the one P#scopes: a claim's enrolment then goes to the node of its
  // record, and a registry moves with its slot.
  bool slot_registries = false;
};

// The record settings of a store's options (any of the Redis stores': the fields of these names
// mean the same in each); `slot_registries` for a cluster's.
template <class Options>
redis_record_settings redis_record_settings_of(const Options& given, bool slot_registries = false) {
  return {.prefix = given.prefix,
          .clock = given.clock,
          .caller_time_margin = given.caller_time_margin,
          .max_records_per_scope = given.max_records_per_scope,
          .replicas = given.replicas,
          .replica_timeout = given.replica_timeout,
          .slot_registries = slot_registries};
}

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

  // With time_source::server, `lease_until` is read as a duration from this machine's clock
  // (lease_until - system_clock::now()) and added to the server's time.
  template <class Send>
  decltype(auto) checkpoint(const fenced_key& held, std::string_view recovery,
                            store_time lease_until, Send&& send) const {
    const redis_keys names = keys_of(held.scope, held.key);
    const std::string fence = redis_decimal(held.fence);
    std::string until;
    std::string extension = "0";
    if (settings_.clock == time_source::caller) {
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
    return applied_at(replies, 0, operation);
  }
  // The same, for the script at `position` of a pipelined batch of them.
  bool applied_at(const std::vector<redis_reply>& replies, std::size_t position,
                  const char* operation) const {
    const redisReply* answer = replies.at(position).get();
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

  // A time argument of the scripts: empty (the server's TIME) with time_source::server.
  std::string now_argument(store_time now) const {
    if (settings_.clock == time_source::server) return {};
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
    return settings_.clock == time_source::caller ? settings_.caller_time_margin.count() : 0;
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

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_OPERATIONS_HPP
