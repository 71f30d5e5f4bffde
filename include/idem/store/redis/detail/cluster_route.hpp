// What redis_cluster_store and async_redis_cluster_store share above the wire: the checks of
// their options and what the options make (the record settings, the nodes' connection settings,
// where errors say the store is), the following of the cluster's refusals one round at a time
// (redis_cluster_route), and the reading of which slots hold scopes. Each store only moves the
// commands: the blocking one on a thread, the asynchronous one on its strand.
#ifndef IDEM_STORE_REDIS_DETAIL_CLUSTER_ROUTE_HPP
#define IDEM_STORE_REDIS_DETAIL_CLUSTER_ROUTE_HPP

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <idem/store/contract.hpp>
#include <idem/store/redis/detail/cluster.hpp>
#include <idem/store/redis/detail/connection.hpp>
#include <idem/store/redis/detail/keys.hpp>
#include <idem/store/redis/detail/operations.hpp>
#include <idem/store/redis/detail/reply.hpp>

namespace idem::detail {

// A cluster store's options checked: std::invalid_argument for no node, a node that is not
// host:port, max_redirects 0, a pause that is not positive, or a replica timeout that does not
// end before the command's own.
template <class Options>
Options redis_cluster_checked(const char* who, Options given) {
  if (given.nodes.empty()) {
    throw std::invalid_argument(std::string(who) +
                                ": nodes is empty: name at least one cluster node as "
                                "host:port to learn the slot map from");
  }
  for (const std::string& each : given.nodes) {
    if (!redis_address_of(each)) {
      throw std::invalid_argument(std::string(who) + ": node '" + each +
                                  "' is not host:port with a TCP port");
    }
  }
  if (given.max_redirects == 0) {
    throw std::invalid_argument(std::string(who) + ": max_redirects must be at least 1");
  }
  if (given.retry_pause <= std::chrono::milliseconds::zero()) {
    throw std::invalid_argument(std::string(who) + ": retry_pause must be positive");
  }
  redis_check_replica_timeout(who, given.replicas, given.replica_timeout, given.command_timeout);
  return given;
}

// Where errors say the store is: "the cluster (host:port, ...)", the nodes named.
template <class Options>
std::string redis_cluster_where(const Options& given) {
  std::string where = "the cluster (";
  for (std::size_t i = 0; i < given.nodes.size(); ++i) {
    if (i > 0) where += ", ";
    where += given.nodes[i];
  }
  return where + ")";
}

// The connection settings of the node at `address`.
template <class Options>
redis_settings redis_cluster_node_settings(const Options& given, const redis_address& address,
                                           const char* who) {
  return {.host = address.host,
          .port = address.port,
          .unix_socket = {},
          .sentinels = {},
          .master_name = {},
          .username = given.username,
          .password = given.password,
          .database = 0,
          .pool_size = given.pool_size,
          .connect_timeout = given.connect_timeout,
          .command_timeout = given.command_timeout,
          .verify_eviction_policy = given.verify_eviction_policy,
          .who = who};
}

// One operation of one slot on its way through the cluster's refusals (the top of
// idem/store/redis/cluster.hpp): which of its commands are still to send, whether after ASKING,
// and what to do after each round's replies. Only the refused commands are sent again, so
// following a refusal never runs anything twice.
class redis_cluster_route {
 public:
  // What the store does after a round.
  enum class next : std::uint8_t {
    done,        // every command ran: take_answers()
    redirected,  // MOVED or ASK: send pending() to redirect().to (after ASKING when asking())
    later,       // TRYAGAIN or CLUSTERDOWN: wait take_pause(), then send pending() to the owner
    given_up,    // refused max_redirects times: mark the map stale and throw given_up_error()
  };

  redis_cluster_route(std::size_t count, std::uint16_t slot, const char* operation,
                      std::size_t max_redirects, std::chrono::milliseconds first_pause)
      : answers_(count),
        pending_(count),
        slot_(slot),
        operation_(operation),
        max_redirects_(max_redirects),
        pause_(first_pause) {
    for (std::size_t i = 0; i < count; ++i)
      pending_[i] = i;
  }

  // The indexes of the commands the next round sends, in order.
  const std::vector<std::size_t>& pending() const noexcept { return pending_; }
  // Whether each of them goes after an ASKING of its own (the flag lasts one command).
  bool asking() const noexcept { return asking_; }
  // After next::redirected: where to.
  const redis_redirect& redirect() const noexcept { return *redirect_; }

  // Takes the replies of a round sent to the node at `where`: one per pending command, then
  // those of the `added` commands sent after them (a write's WAIT). Throws the operations'
  // store_error for a round of the wrong size, or when the writes that ran here did not reach
  // their replicas.
  next absorb(std::vector<redis_reply>& replies, std::size_t added,
              const redis_operations& operations, const std::string& where) {
    if (replies.size() != pending_.size() + added) throw operations.malformed(operation_);
    redirect_.reset();
    std::vector<std::size_t> refused;
    bool ran = false;
    bool ran_cleanly = true;
    for (std::size_t k = 0; k < pending_.size(); ++k) {
      const redisReply* reply = replies[k].get();
      std::optional<redis_redirect> here = redis_redirect_of(reply);
      if (here || redis_retry_later(reply)) {
        if (here && !redirect_) redirect_ = std::move(here);
        refusal_ = reply_text(reply);
        refused.push_back(pending_[k]);
        continue;
      }
      ran = true;
      ran_cleanly = ran_cleanly && !redis_operations::is_error(reply);
      answers_[pending_[k]] = std::move(replies[k]);
    }
    // The writes that ran here waited for this node's replicas.
    if (added > 0 && ran && ran_cleanly) {
      operations.check_replicated(replies.back().get(), operation_);
    }
    if (refused.empty()) return next::done;
    ++rounds_refused_;
    refused_by_ = where;
    if (rounds_refused_ >= max_redirects_) return next::given_up;
    pending_ = std::move(refused);
    if (redirect_) {
      asking_ = redirect_->how == redis_redirect::kind::ask;
      return next::redirected;
    }
    asking_ = false;
    return next::later;
  }

  // After next::later: how long to wait; each later pause doubles, up to a second.
  std::chrono::milliseconds take_pause() noexcept {
    const std::chrono::milliseconds now = pause_;
    pause_ = std::min<std::chrono::milliseconds>(pause_ * 2, std::chrono::seconds{1});
    return now;
  }

  // After next::given_up.
  store_error given_up_error(const char* who) const {
    return store_error(store_failure::unavailable,
                       std::string(who) + ": " + operation_ + " was refused " +
                           std::to_string(rounds_refused_) + " times by the cluster (slot " +
                           std::to_string(slot_) + "), the last time by " + refused_by_ + ": " +
                           refusal_);
  }

  // After next::done: each command's reply, in the order of the commands.
  std::vector<redis_reply> take_answers() noexcept { return std::move(answers_); }

 private:
  std::vector<redis_reply> answers_;
  std::vector<std::size_t> pending_;
  std::uint16_t slot_;
  const char* operation_;
  std::size_t max_redirects_;
  std::chrono::milliseconds pause_;
  std::size_t rounds_refused_ = 0;
  bool asking_ = false;
  std::optional<redis_redirect> redirect_;
  std::string refusal_;
  std::string refused_by_;
};

// The slots the map names a node for, grouped by that node's index: `owner(slot)` is the index
// plus one. Throws store_error(unavailable) for a slot no primary serves.
template <class Owner>
std::vector<std::vector<std::uint16_t>> redis_slots_by_node(Owner owner, const char* who,
                                                            const char* operation) {
  std::vector<std::vector<std::uint16_t>> by_node;
  for (std::size_t slot = 0; slot < redis_slot_count; ++slot) {
    const std::uint16_t at = owner(static_cast<std::uint16_t>(slot));
    if (at == 0) {
      throw store_error(store_failure::unavailable,
                        std::string(who) + ": " + operation + ": no primary serves hash slot " +
                            std::to_string(slot) + " (CLUSTER SLOTS names none)");
    }
    if (by_node.size() < at) by_node.resize(at);
    by_node[at - 1U].push_back(static_cast<std::uint16_t>(slot));
  }
  return by_node;
}

// The slots of `asked` whose registry is not empty, from the replies of their SCARDs, added to
// `found`. A slot whose node refused (it moved) is kept: its walk follows the refusal.
inline void redis_add_slots_with_scopes(const std::vector<redis_reply>& replies,
                                        std::span<const std::uint16_t> asked,
                                        const redis_operations& operations, const char* operation,
                                        std::vector<std::uint16_t>& found) {
  if (replies.size() != asked.size()) throw operations.malformed(operation);
  for (std::size_t k = 0; k < replies.size(); ++k) {
    const redisReply* reply = replies[k].get();
    if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 0) continue;
    if (reply->type == REDIS_REPLY_ERROR && !redis_redirect_of(reply) &&
        !redis_retry_later(reply)) {
      throw operations.failure(operation, reply);
    }
    found.push_back(asked[k]);
  }
}

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_CLUSTER_ROUTE_HPP
