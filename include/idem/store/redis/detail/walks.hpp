// sweep and stuck as walks of round trips, over a scope registry: a walk hands out one step at a
// time (script calls or plain commands, sent in one round trip) and is fed that step's replies,
// until it is done. redis_store, redis_cluster_store (one walk per slot's registry) and
// async_redis_store run them; the calls and decoding they build on are operations.hpp's.
#ifndef IDEM_STORE_REDIS_DETAIL_WALKS_HPP
#define IDEM_STORE_REDIS_DETAIL_WALKS_HPP

#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/store/contract.hpp>
#include <idem/store/redis/detail/command.hpp>
#include <idem/store/redis/detail/keys.hpp>
#include <idem/store/redis/detail/operations.hpp>
#include <idem/store/redis/detail/reply.hpp>
#include <idem/store/redis/detail/scripts.hpp>

namespace idem::detail {

// One round trip of a walk: script calls or plain commands (never both); none when it is over.
struct redis_step {
  std::span<const redis_command> scripts;
  std::span<const std::vector<std::string_view>> plain;
  bool done() const noexcept { return scripts.empty() && plain.empty(); }
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

#endif  // IDEM_STORE_REDIS_DETAIL_WALKS_HPP
