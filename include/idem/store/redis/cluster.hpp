// redis_cluster_store: the store contract (idem/store/contract.hpp) on a Redis Cluster, through
// hiredis. The same scripts, records and keys as redis_store (idem/store/redis.hpp, whose top
// says what each operation does), routed to the primary that serves each record's hash slot.
//
// Slots. Every key of one record, and its scope's indexes, carry the hash tag of the scope
// (store/redis/detail/keys.hpp), so each operation's script touches one slot and runs on one node.
// What that means: a scope lives on one primary. A hot scope (one tenant with most of the
// traffic) is not spread over the cluster, and `max_records_per_scope` counts one node's index,
// exactly as on one server. Spread load by spreading scopes.
//
// The scope registries. redis_store keeps one set of every scope (P#scopes), which would sit in
// one slot and take every claim's enrolment on one node. Here there is one registry per slot,
// P#scopes{N} with N a tag in that slot, written in the same round trip as the claim, on the
// same node, and moved with its slot. sweep and stuck ask each primary which of its slots'
// registries are not empty (one pipelined round trip per primary), then walk those slots as
// redis_store walks its one registry.
//
// Routing. The store learns the slot map from CLUSTER SLOTS, asked of the seed nodes at
// construction (`options::nodes`: any one that answers will do) and of the known nodes after.
// Each operation goes to the primary its map names for the slot, on that node's pool of
// connections. A node that answers:
//   MOVED slot host:port   the slot lives there now: the map's entry changes at once, the whole
//                          map is asked for again before the next operation, and the commands
//                          that were refused go there;
//   ASK slot host:port     the slot is being migrated and those keys are on the importing node
//                          already: the refused commands go there once, after ASKING, and the
//                          map is unchanged;
//   TRYAGAIN, CLUSTERDOWN  a migration has some of the keys here and some there, or the slot
//                          has no primary until a failover ends: sent again after a pause
//                          (`retry_pause`, doubling).
// A refusal means the command did not run, so following it never runs anything twice; only the
// commands refused are sent again (in one round trip, a claim's script may run at the migrating
// node and its enrolment be refused, or the reverse). After `max_redirects` refusals the
// operation throws store_error(unavailable). A node that does not answer throws
// store_error(unavailable) as redis_store does (a write may or may not have applied: ambiguous),
// and the map is asked for again before the next operation, so a failover's new primary is
// found.
//
// Replicas. `options::replicas` makes each write WAIT for that many of its primary's replicas,
// as in redis_store. In cluster mode PUBLISH travels over the cluster bus, not the replication
// stream, so a claim that only read a record relies on Redis 7's WAIT counting from the
// connection's last command (redis_store's claim sends PUBLISH so as not to rely on it).
//
// Needs Redis 7.0 or newer on every primary, each checked (version, maxmemory-policy) when the
// store first talks to it, and database 0 (the only one a cluster has). Every option and its
// default: docs/stores/redis.md, "Redis Cluster".
#ifndef IDEM_STORE_REDIS_CLUSTER_HPP
#define IDEM_STORE_REDIS_CLUSTER_HPP

#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <idem/store/contract.hpp>
#include <idem/store/redis/detail/cluster.hpp>
#include <idem/store/redis/detail/cluster_route.hpp>
#include <idem/store/redis/detail/connection.hpp>
#include <idem/store/redis/detail/keys.hpp>
#include <idem/store/redis/detail/operations.hpp>
#include <idem/store/redis/detail/walks.hpp>

namespace idem {

class redis_cluster_store {
 public:
  /// As redis_store: records keep no completion time.
  static constexpr bool reads_completion_time = false;

  struct options {
    /// "host:port" of cluster nodes to learn the slot map from: any one that answers will do,
    /// so name several. The others are found through CLUSTER SLOTS.
    std::vector<std::string> nodes;
    /// AUTH on every node, when set (username empty: the default user).
    std::string username;
    std::string password;
    /// As redis_store's: every key begins with it; no '{' or '}'.
    std::string prefix = "idem:";
    /// Connections the store may open to each primary.
    std::size_t pool_size = 8;
    std::chrono::milliseconds connect_timeout{2000};
    std::chrono::milliseconds command_timeout{5000};
    time_source clock = time_source::server;
    std::chrono::milliseconds caller_time_margin{std::chrono::minutes{10}};
    /// As redis_store's; a scope's records are on one primary, so this caps one node's index.
    std::size_t max_records_per_scope = std::numeric_limits<std::size_t>::max();
    bool verify_eviction_policy = true;
    /// As redis_store's: replicas of its primary each write waits for (WAIT), and how long.
    std::size_t replicas = 0;
    std::chrono::milliseconds replica_timeout{1000};
    /// Refusals (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) one operation follows before it throws
    /// store_error(unavailable).
    std::size_t max_redirects = 16;
    /// The first pause before a command refused with TRYAGAIN or CLUSTERDOWN is sent again;
    /// each later one doubles, up to a second.
    std::chrono::milliseconds retry_pause{10};
  };

  /// An unconnected handle (see redis_store()); its operations throw std::logic_error.
  redis_cluster_store() = default;
  /// Learns the slot map from the first seed node that answers, and checks every primary
  /// (version 7.0+, maxmemory-policy) and loads the scripts there. Throws std::invalid_argument
  /// for bad options, a node that is not a cluster node or could evict records, and
  /// store_error(unavailable) when no seed, or some primary, cannot be reached.
  explicit redis_cluster_store(options settings)
      : state_(std::make_shared<shared_state>(std::move(settings))) {
    state_->start();
  }

  claim_result claim(const claim_request& request) {
    shared_state& on = state();
    const std::string tag = detail::redis_tag_of(request.scope);
    return on.operations.claim_result_of(
        on.operations.claim(request, scripts_send{&on, tag, "claim", true, true}));
  }

  bool complete(const fenced_key& held, std::string_view response, store_time /*now*/) {
    shared_state& on = state();
    const std::string tag = detail::redis_tag_of(held.scope);
    return on.operations.applied(
        on.operations.complete(held, response, scripts_send{&on, tag, "complete", true, false}),
        "complete");
  }

  bool release(const fenced_key& held) {
    shared_state& on = state();
    const std::string tag = detail::redis_tag_of(held.scope);
    return on.operations.applied(
        on.operations.release(held, scripts_send{&on, tag, "release", true, false}), "release");
  }

  /// As redis_store's checkpoint.
  bool checkpoint(const fenced_key& held, std::string_view recovery, store_time lease_until) {
    shared_state& on = state();
    const std::string tag = detail::redis_tag_of(held.scope);
    return on.operations.applied(
        on.operations.checkpoint(held, recovery, lease_until,
                                 scripts_send{&on, tag, "checkpoint", true, false}),
        "checkpoint");
  }

  std::optional<record> find(std::string_view scope, std::string_view key, store_time now) const {
    shared_state& on = state();
    const std::string tag = detail::redis_tag_of(scope);
    return on.operations.found(
        on.operations.find(scope, key, now, scripts_send{&on, tag, "find", false, false}), scope,
        key);
  }

  /// As redis_store's sweep, slot by slot: each primary is asked which of its slots' registries
  /// are not empty (one round trip each), then those slots are walked.
  std::size_t sweep(store_time now) {
    shared_state& on = state();
    std::size_t removed = 0;
    for (const std::uint16_t slot : on.slots_with_scopes("sweep")) {
      detail::redis_sweep_walk walk(on.operations, now, on.operations.slot_registry(slot));
      detail::redis_walk(walk, step_send{&on, slot, "sweep"});
      removed += walk.removed();
    }
    return removed;
  }

  /// As redis_store's stuck, slot by slot, until `limit` records are found.
  std::vector<record> stuck(store_time now, std::size_t limit) const {
    shared_state& on = state();
    std::vector<record> found;
    if (limit == 0) return found;
    for (const std::uint16_t slot : on.slots_with_scopes("stuck")) {
      detail::redis_stuck_walk walk(on.operations, now, limit - found.size(),
                                    on.operations.slot_registry(slot));
      detail::redis_walk(walk, step_send{&on, slot, "stuck"});
      for (record& each : walk.take())
        found.push_back(std::move(each));
      if (found.size() >= limit) break;
    }
    return found;
  }

  const options& settings() const { return state().settings; }

  /// How many times the slot map was read (CLUSTER SLOTS) since construction, the first
  /// included: what a test of MOVED or of a failover looks at.
  std::uint64_t slot_map_reads() const { return state().map_reads.load(); }

 private:
  // One primary (or a node that was one): its address and its pool of connections. Started
  // (checked, scripts loaded) the first time an operation goes there.
  struct node {
    explicit node(detail::redis_settings given)
        : address(given.host + ":" + std::to_string(given.port)), client(std::move(given)) {}
    std::string address;
    detail::redis_client client;
    std::mutex starting;
    std::atomic<bool> started{false};

    void ensure_started() {
      if (started.load(std::memory_order_acquire)) return;
      const std::lock_guard lock(starting);
      if (started.load(std::memory_order_relaxed)) return;
      client.start();
      started.store(true, std::memory_order_release);
    }
  };

  // The shared part of every copy: the options, the operations' calls, the known nodes and the
  // slot map. The map is read without a lock: each slot's entry is the index (plus one; 0 for
  // none) of its node in `table`, whose entries are set once and never removed while the
  // store lives.
  struct shared_state {
    static constexpr std::size_t max_nodes = 1024;

    explicit shared_state(options given)
        : settings(detail::redis_cluster_checked(who, std::move(given))),
          operations(detail::redis_record_settings_of(settings, true), who,
                     detail::redis_cluster_where(settings)) {}
    shared_state(const shared_state&) = delete;
    shared_state& operator=(const shared_state&) = delete;
    ~shared_state() = default;

    static constexpr const char* who = "idem::redis_cluster_store";
    options settings;
    detail::redis_operations operations;
    std::array<std::atomic<std::uint16_t>, detail::redis_slot_count> owner{};
    std::array<std::atomic<node*>, max_nodes> table{};
    std::mutex nodes_mutex;
    std::vector<std::unique_ptr<node>> owned;  // under nodes_mutex; never shrinks
    std::mutex refresh_mutex;
    std::atomic<bool> stale{false};
    std::atomic<std::uint64_t> map_reads{0};

    // The seeds, the slot map, and every primary started (checked, scripts loaded).
    void start() {
      for (const std::string& seed : settings.nodes)
        (void)node_index(*detail::redis_address_of(seed));
      refresh();
      std::vector<node*> primaries;
      for (std::size_t slot = 0; slot < detail::redis_slot_count; ++slot) {
        const std::uint16_t at = owner[slot].load(std::memory_order_acquire);
        if (at == 0) continue;
        node* serving = table[at - 1U].load(std::memory_order_acquire);
        if (std::find(primaries.begin(), primaries.end(), serving) == primaries.end()) {
          primaries.push_back(serving);
        }
      }
      for (node* primary : primaries)
        primary->ensure_started();
    }

    // The index of the node at `address`, made (not started) when it is new.
    std::uint16_t node_index(const detail::redis_address& address) {
      const std::string text = detail::redis_address_text(address);
      const std::lock_guard lock(nodes_mutex);
      for (std::size_t i = 0; i < owned.size(); ++i) {
        if (owned[i]->address == text) return static_cast<std::uint16_t>(i);
      }
      if (owned.size() == max_nodes) {
        throw store_error(store_failure::unavailable,
                          std::string(who) + ": more than " + std::to_string(max_nodes) +
                              " cluster nodes were named; " + text + " is one too many");
      }
      owned.push_back(std::make_unique<node>(node_settings(address)));
      table[owned.size() - 1].store(owned.back().get(), std::memory_order_release);
      return static_cast<std::uint16_t>(owned.size() - 1);
    }

    std::vector<node*> known_nodes() {
      const std::lock_guard lock(nodes_mutex);
      std::vector<node*> all;
      all.reserve(owned.size());
      for (const auto& each : owned)
        all.push_back(each.get());
      return all;
    }

    // Reads the slot map (CLUSTER SLOTS) from the first known node that answers, and sets every
    // slot's entry from it (none for a slot it does not name). Throws store_error(unavailable)
    // when no node answers, std::invalid_argument when one answers that it is no cluster node.
    void refresh() {
      const std::lock_guard lock(refresh_mutex);
      read_map();
    }

    // Before an operation: the map read again if something said it is stale, unless another
    // thread is reading it now. A failure leaves it stale and the operation goes by the map it
    // has (its node's answer will tell).
    void refresh_if_stale() {
      if (!stale.load(std::memory_order_relaxed)) return;
      const std::unique_lock lock(refresh_mutex, std::try_to_lock);
      if (!lock.owns_lock() || !stale.load(std::memory_order_relaxed)) return;
      try {
        read_map();
      } catch (const store_error&) {
        // Nobody answered now; the operation finds out for itself.
      }
    }

    // refresh()'s work, with refresh_mutex held.
    void read_map() {
      const std::vector<std::string_view> words = {"CLUSTER", "SLOTS"};
      const std::vector<std::vector<std::string_view>> ask = {words};
      std::string failures;
      for (node* candidate : known_nodes()) {
        std::vector<detail::redis_reply> answer;
        try {
          answer = candidate->client.plain(ask, "reading the slot map");
        } catch (const store_error& failed) {
          failures.append("; ").append(failed.what());
          continue;
        }
        const std::vector<detail::redis_slot_range> ranges =
            detail::redis_slot_ranges_of(answer.at(0).get(), candidate->address, who);
        std::vector<std::uint16_t> next(detail::redis_slot_count, 0);
        for (const detail::redis_slot_range& range : ranges) {
          const auto at = static_cast<std::uint16_t>(node_index(range.primary) + 1U);
          for (std::size_t slot = range.first; slot <= range.last; ++slot)
            next[slot] = at;
        }
        for (std::size_t slot = 0; slot < detail::redis_slot_count; ++slot)
          owner[slot].store(next[slot], std::memory_order_release);
        stale.store(false, std::memory_order_relaxed);
        map_reads.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      throw store_error(store_failure::unavailable,
                        std::string(who) + ": no cluster node answered CLUSTER SLOTS" + failures);
    }

    // The node the map names for `slot`; the map read again first when it names none.
    node& owner_of(std::uint16_t slot) {
      std::uint16_t at = owner[slot].load(std::memory_order_acquire);
      if (at == 0) {
        refresh();
        at = owner[slot].load(std::memory_order_acquire);
      }
      if (at == 0) {
        throw store_error(store_failure::unavailable,
                          std::string(who) + ": no primary serves hash slot " +
                              std::to_string(slot) + " (CLUSTER SLOTS names none)");
      }
      return *table[at - 1U].load(std::memory_order_acquire);
    }

    // Sends `count` commands of one slot and answers their replies in order, following the
    // cluster's refusals (the top of this header). `talk(node, pending, asking)` sends the
    // commands whose indexes are in `pending` to `node` (after ASKING when asked) and answers
    // their replies, then those of the `added` commands it sends after them (WAIT).
    template <class Talk>
    std::vector<detail::redis_reply> route(std::uint16_t slot, std::size_t count, std::size_t added,
                                           const char* operation, Talk&& talk) {
      refresh_if_stale();
      detail::redis_cluster_route way(count, slot, operation, settings.max_redirects,
                                      settings.retry_pause);
      node* target = &owner_of(slot);
      for (;;) {
        std::vector<detail::redis_reply> replies;
        try {
          target->ensure_started();
          replies = talk(*target, way.pending(), way.asking());
        } catch (const store_error&) {
          stale.store(true, std::memory_order_relaxed);
          throw;
        }
        switch (way.absorb(replies, added, operations, target->address)) {
          case detail::redis_cluster_route::next::done:
            return way.take_answers();
          case detail::redis_cluster_route::next::given_up:
            stale.store(true, std::memory_order_relaxed);
            throw way.given_up_error(who);
          case detail::redis_cluster_route::next::redirected: {
            const detail::redis_redirect& redirect = way.redirect();
            const std::uint16_t at = node_index(redirect.to);
            target = table[at].load(std::memory_order_acquire);
            if (!way.asking()) {
              owner[redirect.slot].store(static_cast<std::uint16_t>(at + 1U),
                                         std::memory_order_release);
              stale.store(true, std::memory_order_relaxed);
            }
            break;
          }
          case detail::redis_cluster_route::next::later:
            std::this_thread::sleep_for(way.take_pause());
            refresh_if_stale();
            target = &owner_of(slot);
            break;
        }
      }
    }

    // Script calls of one slot (an operation's, or a walk's round); a write's WAIT after them.
    std::vector<detail::redis_reply> scripts(std::uint16_t slot,
                                             std::span<const detail::redis_command> commands,
                                             const char* operation, bool write, bool claim) {
      const auto then = write ? operations.wait_for_replicas(claim)
                              : std::span<const std::span<const std::string_view>>{};
      return route(slot, commands.size(), then.size(), operation,
                   [&](node& to, const std::vector<std::size_t>& pending, bool asking) {
                     if (pending.size() == commands.size()) {
                       return to.client.exchange(commands, operation, then, asking);
                     }
                     std::vector<detail::redis_command> subset;
                     subset.reserve(pending.size());
                     for (const std::size_t i : pending)
                       subset.push_back(commands[i]);
                     return to.client.exchange(subset, operation, then, asking);
                   });
    }

    // Plain commands of one slot (a walk's registry page, its registry updates).
    std::vector<detail::redis_reply> plain(std::uint16_t slot,
                                           std::span<const std::vector<std::string_view>> commands,
                                           const char* operation) {
      return route(slot, commands.size(), 0, operation,
                   [&](node& to, const std::vector<std::size_t>& pending, bool asking) {
                     if (pending.size() == commands.size()) {
                       return to.client.plain(commands, operation, asking);
                     }
                     std::vector<std::vector<std::string_view>> subset;
                     subset.reserve(pending.size());
                     for (const std::size_t i : pending)
                       subset.push_back(commands[i]);
                     return to.client.plain(subset, operation, asking);
                   });
    }

    // The slots whose scope registry is not empty, in order: SCARD of each slot's registry,
    // pipelined to the primary the map names for it. A slot whose node refused (it moved) is
    // kept: its walk follows the refusal.
    std::vector<std::uint16_t> slots_with_scopes(const char* operation) {
      refresh_if_stale();
      const std::vector<std::vector<std::uint16_t>> by_node = detail::redis_slots_by_node(
          [this](std::uint16_t slot) { return owner[slot].load(std::memory_order_acquire); }, who,
          operation);
      std::vector<std::uint16_t> found;
      for (std::size_t i = 0; i < by_node.size(); ++i) {
        if (by_node[i].empty()) continue;
        node& serving = *table[i].load(std::memory_order_acquire);
        std::vector<std::string> names;
        names.reserve(by_node[i].size());
        std::vector<std::vector<std::string_view>> counts;
        counts.reserve(by_node[i].size());
        for (const std::uint16_t slot : by_node[i]) {
          names.push_back(operations.slot_registry(slot));
          counts.push_back({"SCARD", names.back()});
        }
        std::vector<detail::redis_reply> replies;
        try {
          serving.ensure_started();
          replies = serving.client.plain(counts, operation);
        } catch (const store_error&) {
          stale.store(true, std::memory_order_relaxed);
          throw;
        }
        detail::redis_add_slots_with_scopes(replies, by_node[i], operations, operation, found);
      }
      std::sort(found.begin(), found.end());
      return found;
    }

    detail::redis_settings node_settings(const detail::redis_address& address) const {
      return detail::redis_cluster_node_settings(settings, address, who);
    }
  };

  // What an operation's call is given: its script calls, sent to the slot of its scope's tag.
  struct scripts_send {
    shared_state* on;
    const std::string& tag;
    const char* operation;
    bool write;
    bool claim;
    std::vector<detail::redis_reply> operator()(
        std::span<const detail::redis_command> commands) const {
      return on->scripts(detail::redis_tag_slot(tag), commands, operation, write, claim);
    }
  };

  // What a walk over one slot's registry is given: each step to that slot.
  struct step_send {
    shared_state* on;
    std::uint16_t slot;
    const char* operation;
    std::vector<detail::redis_reply> operator()(const detail::redis_step& step) const {
      return step.scripts.empty() ? on->plain(slot, step.plain, operation)
                                  : on->scripts(slot, step.scripts, operation, false, false);
    }
  };

  shared_state& state() const {
    if (!state_) {
      throw std::logic_error(
          "idem::redis_cluster_store: a default-constructed store has no cluster; assign one "
          "made with redis_cluster_store(options) first");
    }
    return *state_;
  }

  std::shared_ptr<shared_state> state_;
};

}  // namespace idem

#endif  // IDEM_STORE_REDIS_CLUSTER_HPP
