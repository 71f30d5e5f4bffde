// async_redis_cluster_store: the asynchronous store contract (idem/store/async_contract.hpp) on a
// Redis Cluster, on an Asio executor, with no thread of its own and no blocking call.
//
// The same store as redis_cluster_store (idem/store/redis/cluster.hpp, whose top says how slots,
// the per-slot scope registries, routing and the cluster's refusals work), through the same
// operations layer (store/redis/detail/operations.hpp): the same scripts, records and keys, so
// the two, and redis_store on one node, can share one cluster. What differs is how the commands
// travel: as async_redis_store's (idem/store/redis/async.hpp), pipelined on each primary's pool
// of connections, each operation one exchange per round, every failure an answer.
//
// Routing. The slot map (CLUSTER SLOTS) is read from the first known node that answers when the
// first operation needs it, and again before the next operation after something said it is
// stale: a node that did not answer, or a MOVED. An operation goes to the primary the map names
// for its scope's slot; MOVED sends the refused commands to the named node and corrects the map,
// ASK sends them there once after ASKING, TRYAGAIN and CLUSTERDOWN send them again after a pause
// (retry_pause, doubling up to a second, waited on a timer, never a thread); after
// max_redirects refusals the operation fails with store_error(unavailable). Only the refused
// commands are sent again, so following a refusal never runs anything twice.
//
// Threads. Every node's pool and the map live on one strand of the executor the store was made
// with; operations may be started from any thread and complete on their handler's associated
// executor (that executor when the handler has none). Destroy the last copy of a store before
// the execution context of its executor.
#ifndef IDEM_STORE_REDIS_ASYNC_CLUSTER_HPP
#define IDEM_STORE_REDIS_ASYNC_CLUSTER_HPP

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/store/async_contract.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/redis/cluster.hpp>
#include <idem/store/redis/detail/async/pool.hpp>
#include <idem/store/redis/detail/async/spawn.hpp>
#include <idem/store/redis/detail/async/wire.hpp>
#include <idem/store/redis/detail/cluster.hpp>
#include <idem/store/redis/detail/cluster_route.hpp>
#include <idem/store/redis/detail/connection.hpp>
#include <idem/store/redis/detail/keys.hpp>
#include <idem/store/redis/detail/operations.hpp>
#include <idem/store/redis/detail/walks.hpp>
#include <idem/store/time_source.hpp>

IDEM_ASIO_CODE_BEGIN

namespace idem {

class async_redis_cluster_store {
 public:
  /// As redis_store: records keep no completion time.
  static constexpr bool reads_completion_time = false;

  /// redis_cluster_store::options, each field meaning the same, and async_redis_store's
  /// reconnect_delay and max_reconnect_delay. `pool_size` is the connections kept to each
  /// primary, each one pipelined.
  struct options : redis_cluster_store::options, detail::redis_reconnect_options {};

  /// A handle with no cluster: every operation throws std::logic_error at its start.
  async_redis_cluster_store() = default;

  /// Checks the options (std::invalid_argument) and connects nothing yet: the first operation
  /// reads the slot map and opens the connections it needs.
  async_redis_cluster_store(asio::any_io_executor executor, options settings)
      : state_(std::make_shared<shared_state>(std::move(executor), std::move(settings))) {}

  asio::any_io_executor get_executor() const { return state().executor; }

  template <class Token>
  auto async_claim(const claim_request& request, Token&& token) {
    const std::string tag = detail::redis_tag_of(request.scope);
    return routed<claim_result>(
        std::forward<Token>(token), "claim", detail::redis_tag_slot(tag),
        state().operations.claim(request, to_wire), true, true,
        [](const shared_state& state, const std::vector<detail::redis_reply>& replies) {
          return state.operations.claim_result_of(replies);
        });
  }
  template <class Token>
  auto async_complete(const fenced_key& held, std::string_view bytes, store_time /*now*/,
                      Token&& token) {
    return routed<bool>(std::forward<Token>(token), "complete", slot_of(held.scope),
                        state().operations.complete(held, bytes, to_wire), true, false,
                        applied{"complete"});
  }
  template <class Token>
  auto async_release(const fenced_key& held, Token&& token) {
    return routed<bool>(std::forward<Token>(token), "release", slot_of(held.scope),
                        state().operations.release(held, to_wire), true, false, applied{"release"});
  }
  /// As async_redis_store's checkpoint.
  template <class Token>
  auto async_checkpoint(const fenced_key& held, std::string_view bytes, store_time lease_until,
                        Token&& token) {
    return routed<bool>(std::forward<Token>(token), "checkpoint", slot_of(held.scope),
                        state().operations.checkpoint(held, bytes, lease_until, to_wire), true,
                        false, applied{"checkpoint"});
  }
  /// The heartbeat's renewals (idem/store/batch.hpp's checkpoint_batch): the entries grouped by
  /// their scope's slot, each slot's checkpoint scripts pipelined in one routed exchange (WAIT
  /// after them when writes wait for replicas), every slot's exchange written before any is
  /// awaited: a tick costs a round trip to each primary concerned, at once, not one per lease.
  /// A refusal (MOVED, ASK, TRYAGAIN) is followed by that slot's exchange alone; any failure
  /// fails the batch, as one renewal's failure fails async_checkpoint.
  template <class Token>
  auto async_checkpoint_batch(std::span<const batch_checkpoint> entries, store_time lease_until,
                              Token&& token) {
    std::vector<slot_batch> batches;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const std::uint16_t slot = slot_of(entries[i].held.scope);
      auto batch = std::find_if(batches.begin(), batches.end(),
                                [slot](const slot_batch& each) { return each.slot == slot; });
      if (batch == batches.end()) batch = batches.insert(batches.end(), slot_batch{slot, {}, {}});
      batch->positions.push_back(i);
      for (detail::redis_wire_command& command : state().operations.checkpoint(
               entries[i].held, entries[i].recovery, lease_until, to_wire)) {
        batch->wire.push_back(std::move(command));
      }
    }
    std::vector<detail::redis_wire_command> then;
    for (const std::span<const std::string_view> words :
         state().operations.wait_for_replicas(false))
      then.push_back(detail::redis_wire_of(words));
    return spawn<std::vector<bool>>(
        std::forward<Token>(token),
        [state = shared(), count = entries.size(), batches = std::move(batches),
         then = std::move(
             then)]() mutable -> asio::awaitable<std::vector<bool>, detail::redis_strand> {
          std::vector<bool> renewed(count, false);
          const std::vector<std::vector<detail::redis_reply>> replies =
              co_await route_all(state, batches, then, "checkpoint_batch");
          for (std::size_t b = 0; b < batches.size(); ++b) {
            for (std::size_t k = 0; k < batches[b].positions.size(); ++k) {
              renewed[batches[b].positions[k]] =
                  state->operations.applied_at(replies[b], k, "checkpoint_batch");
            }
          }
          co_return renewed;
        });
  }
  template <class Token>
  auto async_find(std::string_view scope, std::string_view key, store_time now, Token&& token) {
    return routed<std::optional<record>>(
        std::forward<Token>(token), "find", slot_of(scope),
        state().operations.find(scope, key, now, to_wire), false, false,
        [scope = std::string(scope), key = std::string(key)](
            const shared_state& state, const std::vector<detail::redis_reply>& replies) {
          return state.operations.found(replies, scope, key);
        });
  }
  /// redis_cluster_store::sweep's semantics: the slots whose registry is not empty, asked of
  /// each primary in one round trip, then walked one by one.
  template <class Token>
  auto async_sweep(store_time now, Token&& token) {
    return spawn<std::size_t>(
        std::forward<Token>(token),
        [state = shared(), now]() -> asio::awaitable<std::size_t, detail::redis_strand> {
          std::size_t removed = 0;
          for (const std::uint16_t slot : co_await slots_with_scopes(*state, "sweep")) {
            detail::redis_sweep_walk walk(state->operations, now,
                                          state->operations.slot_registry(slot));
            co_await walk_through(*state, slot, walk, "sweep");
            removed += walk.removed();
          }
          co_return removed;
        });
  }
  /// redis_cluster_store::stuck's semantics. Reads only.
  template <class Token>
  auto async_stuck(store_time now, std::size_t limit, Token&& token) {
    return spawn<std::vector<record>>(
        std::forward<Token>(token),
        [state = shared(), now,
         limit]() -> asio::awaitable<std::vector<record>, detail::redis_strand> {
          std::vector<record> found;
          if (limit == 0) co_return found;
          for (const std::uint16_t slot : co_await slots_with_scopes(*state, "stuck")) {
            detail::redis_stuck_walk walk(state->operations, now, limit - found.size(),
                                          state->operations.slot_registry(slot));
            co_await walk_through(*state, slot, walk, "stuck");
            for (record& each : walk.take())
              found.push_back(std::move(each));
            if (found.size() >= limit) break;
          }
          co_return found;
        });
  }

  const options& settings() const { return state().settings; }

  /// How many times the slot map was read since construction; completes with std::uint64_t.
  /// What a test of MOVED or of a failover looks at.
  template <class Token>
  auto async_slot_map_reads(Token&& token) {
    return spawn<std::uint64_t>(
        std::forward<Token>(token),
        [state = shared()]() -> asio::awaitable<std::uint64_t, detail::redis_strand> {
          co_return state->map_reads;
        });
  }

 private:
  static constexpr const char* who = "idem::async_redis_cluster_store";
  using awaitable_token = asio::use_awaitable_t<detail::redis_strand>;

  // One node: its address and its pool of connections, on the store's strand.
  struct node {
    std::string address;
    std::shared_ptr<detail::redis_async_pool> pool;
  };

  // Every copy's shared part. Everything but the options, the executor and the operations is
  // read and written on `strand` only.
  struct shared_state {
    static constexpr std::size_t max_nodes = 1024;

    shared_state(asio::any_io_executor given, options settings_given)
        : settings(detail::redis_cluster_checked(who, std::move(settings_given))),
          executor(checked(std::move(given))),
          strand(asio::make_strand(executor)),
          operations(detail::redis_record_settings_of(settings, true), who,
                     detail::redis_cluster_where(settings)) {
      for (const std::string& seed : settings.nodes)
        (void)node_index(*detail::redis_address_of(seed));
    }
    shared_state(const shared_state&) = delete;
    shared_state& operator=(const shared_state&) = delete;
    // The connections close on the strand: what is in flight there fails, nothing waits here.
    ~shared_state() {
      try {
        asio::post(strand, [nodes = std::move(nodes)] {
          for (const node& each : nodes)
            each.pool->shut();
        });
      } catch (...) {
        // Out of memory: the connections close when their pools' last owners let them go.
      }
    }

    options settings;
    asio::any_io_executor executor;
    detail::redis_strand strand;
    detail::redis_operations operations;
    std::vector<node> nodes;  // never shrinks while the store lives
    std::array<std::uint16_t, detail::redis_slot_count> owner{};  // index + 1 in nodes; 0 none
    bool stale = true;        // read the map before the next operation
    bool refreshing = false;  // a coroutine is reading it now
    std::uint64_t map_reads = 0;

    // The index of the node at `address`, made when it is new (its pool connects nothing yet).
    std::size_t node_index(const detail::redis_address& address) {
      const std::string text = detail::redis_address_text(address);
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i].address == text) return i;
      }
      if (nodes.size() == max_nodes) {
        throw store_error(store_failure::unavailable,
                          std::string(who) + ": more than " + std::to_string(max_nodes) +
                              " cluster nodes were named; " + text + " is one too many");
      }
      nodes.push_back(node{text, std::make_shared<detail::redis_async_pool>(
                                     strand, node_settings(address), settings.backoff())});
      return nodes.size() - 1;
    }

    static asio::any_io_executor checked(asio::any_io_executor executor) {
      if (!executor) throw std::invalid_argument(std::string(who) + ": the executor is empty");
      return executor;
    }

    detail::redis_settings node_settings(const detail::redis_address& address) const {
      return detail::redis_cluster_node_settings(settings, address, who);
    }
  };

  // Reads the slot map from the first known node that answers and sets every slot's entry from
  // it. Fails with store_error(unavailable) when no node answers, std::invalid_argument when one
  // answers that it is no cluster node.
  static asio::awaitable<void, detail::redis_strand> read_map(shared_state& state) {
    const std::array<std::string_view, 2> words{"CLUSTER", "SLOTS"};
    std::string failures;
    for (std::size_t i = 0; i < state.nodes.size(); ++i) {
      const node candidate = state.nodes[i];
      std::vector<detail::redis_wire_command> ask;
      ask.push_back(detail::redis_wire_of(std::span<const std::string_view>(words)));
      std::vector<detail::redis_reply> answer;
      try {
        answer = co_await detail::async_redis_exchange(candidate.pool, std::move(ask),
                                                       "reading the slot map", awaitable_token{});
      } catch (const store_error& failed) {
        failures.append("; ").append(failed.what());
        continue;
      }
      set_map(state, answer.at(0).get(), candidate.address);
      co_return;
    }
    throw store_error(store_failure::unavailable,
                      std::string(who) + ": no cluster node answered CLUSTER SLOTS" + failures);
  }

  // The map CLUSTER SLOTS answered, from `address`: every slot's entry (none for a slot it
  // does not name). A plain function: GCC 12 cannot keep the new map in a coroutine's frame.
  static void set_map(shared_state& state, const redisReply* answer, const std::string& address) {
    const std::vector<detail::redis_slot_range> ranges =
        detail::redis_slot_ranges_of(answer, address, who);
    auto next = std::make_unique<std::array<std::uint16_t, detail::redis_slot_count>>();
    next->fill(0);
    for (const detail::redis_slot_range& range : ranges) {
      const auto at = static_cast<std::uint16_t>(state.node_index(range.primary) + 1U);
      for (std::size_t slot = range.first; slot <= range.last; ++slot)
        (*next)[slot] = at;
    }
    state.owner = *next;
    state.stale = false;
    ++state.map_reads;
  }

  // Before an operation: the map read again when something said it is stale, unless another
  // coroutine is reading it now. A failure leaves it stale; the operation goes by the map it has
  // (and a slot the map names no node for fails in owner_of).
  static asio::awaitable<void, detail::redis_strand> refresh_if_stale(shared_state& state) {
    if (!state.stale || state.refreshing) co_return;
    state.refreshing = true;
    try {
      co_await read_map(state);
    } catch (const store_error&) {
      // Nobody answered now; the operation finds out for itself.
    } catch (...) {
      state.refreshing = false;
      throw;
    }
    state.refreshing = false;
  }

  // The node the map names for `slot`; the map read first when it names none.
  static asio::awaitable<std::size_t, detail::redis_strand> owner_of(shared_state& state,
                                                                     std::uint16_t slot) {
    if (state.owner[slot] == 0) co_await read_map(state);
    if (state.owner[slot] == 0) {
      throw store_error(store_failure::unavailable,
                        std::string(who) + ": no primary serves hash slot " + std::to_string(slot) +
                            " (CLUSTER SLOTS names none)");
    }
    co_return static_cast<std::size_t>(state.owner[slot] - 1U);
  }

  // Sends the commands of one slot and answers their replies in order, following the cluster's
  // refusals (the top of this header); `then` (WAIT) follows the commands of each round on the
  // node they go to, and its replies are answered after theirs, from the last round that ran
  // commands.
  static asio::awaitable<std::vector<detail::redis_reply>, detail::redis_strand> route(
      shared_state& state, std::uint16_t slot, std::vector<detail::redis_wire_command> commands,
      std::vector<detail::redis_wire_command> then, const char* operation) {
    co_await refresh_if_stale(state);
    detail::redis_cluster_route way(commands.size(), slot, operation, state.settings.max_redirects,
                                    state.settings.retry_pause);
    std::size_t target = co_await owner_of(state, slot);
    for (;;) {
      // After ASK each command goes after an ASKING of its own: the flag lasts one command.
      std::vector<detail::redis_wire_command> wire;
      wire.reserve(2 * way.pending().size() + then.size());
      for (const std::size_t i : way.pending()) {
        if (way.asking()) wire.push_back(asking_command());
        wire.push_back(commands[i]);
      }
      for (const detail::redis_wire_command& each : then)
        wire.push_back(each);
      std::vector<detail::redis_reply> replies;
      try {
        replies = co_await detail::async_redis_exchange(state.nodes[target].pool, std::move(wire),
                                                        operation, awaitable_token{});
      } catch (const store_error&) {
        state.stale = true;  // a failover may have moved the slot: ask before the next one
        throw;
      }
      if (way.asking()) replies = without_askings(std::move(replies), way.pending().size());
      switch (way.absorb(replies, then.size(), state.operations, state.nodes[target].address)) {
        case detail::redis_cluster_route::next::done:
          co_return way.take_answers();
        case detail::redis_cluster_route::next::given_up:
          state.stale = true;
          throw way.given_up_error(who);
        case detail::redis_cluster_route::next::redirected:
          target = state.node_index(way.redirect().to);
          if (!way.asking()) {
            state.owner[way.redirect().slot] = static_cast<std::uint16_t>(target + 1U);
            state.stale = true;
          }
          break;
        case detail::redis_cluster_route::next::later: {
          detail::redis_timer timer(state.strand);
          timer.expires_after(way.take_pause());
          co_await timer.async_wait(awaitable_token{});
          co_await refresh_if_stale(state);
          target = co_await owner_of(state, slot);
          break;
        }
      }
    }
  }

  // One slot's part of a batch: the positions of its entries in the batch, and their commands.
  struct slot_batch {
    std::uint16_t slot;
    std::vector<std::size_t> positions;
    std::vector<detail::redis_wire_command> wire;
  };

  // Routes every batch's commands (with `then` after each) at once, each on a coroutine of its
  // own on the strand, so that each exchange is written before any is awaited, and answers their
  // replies in the batches' order once all have ended; the first failure is thrown then. What
  // the routes write to, and the store's state, are kept by their handlers: a caller cancelled
  // meanwhile (its next co_await throws) leaves them nothing dangling.
  static asio::awaitable<std::vector<std::vector<detail::redis_reply>>, detail::redis_strand>
  route_all(const std::shared_ptr<shared_state>& state, std::vector<slot_batch>& batches,
            const std::vector<detail::redis_wire_command>& then, const char* operation) {
    if (batches.size() == 1) {
      std::vector<std::vector<detail::redis_reply>> replies(1);
      replies[0] =
          co_await route(*state, batches[0].slot, std::move(batches[0].wire), then, operation);
      co_return replies;
    }
    struct joined {
      explicit joined(const detail::redis_strand& strand, std::size_t count)
          : replies(count), left(count), all_ended(strand) {
        all_ended.expires_at(detail::redis_timer::time_point::max());
      }
      std::vector<std::vector<detail::redis_reply>> replies;
      std::size_t left;
      std::exception_ptr failed;
      detail::redis_timer all_ended;
    };
    const auto join = std::make_shared<joined>(state->strand, batches.size());
    for (std::size_t b = 0; b < batches.size(); ++b) {
      asio::co_spawn(state->strand,
                     route(*state, batches[b].slot, std::move(batches[b].wire), then, operation),
                     [join, state, b](const std::exception_ptr& error,
                                      std::vector<detail::redis_reply> answers) {
                       if (error && !join->failed) join->failed = error;
                       join->replies[b] = std::move(answers);
                       if (--join->left == 0) join->all_ended.cancel();
                     });
    }
    while (join->left > 0) {
      asio_error_code woken;  // operation_aborted: the last route ended
      co_await join->all_ended.async_wait(asio::redirect_error(awaitable_token{}, woken));
    }
    if (join->failed) std::rethrow_exception(join->failed);
    co_return std::move(join->replies);
  }

  static detail::redis_wire_command asking_command() {
    const std::array<std::string_view, 1> words{"ASKING"};
    return detail::redis_wire_of(std::span<const std::string_view>(words));
  }

  // The replies of an exchange sent after ASK without ASKING's, one before each of the first
  // `asked` replies (those of the keyed commands).
  static std::vector<detail::redis_reply> without_askings(std::vector<detail::redis_reply> replies,
                                                          std::size_t asked) {
    std::vector<detail::redis_reply> kept;
    kept.reserve(replies.size());
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (i < 2 * asked && i % 2 == 0) continue;  // ASKING's +OK
      kept.push_back(std::move(replies[i]));
    }
    return kept;
  }

  // The slots whose scope registry is not empty, in order: SCARD of each slot's registry,
  // pipelined to the primary the map names for it. A slot whose node refused (it moved) is kept:
  // its walk follows the refusal.
  static asio::awaitable<std::vector<std::uint16_t>, detail::redis_strand> slots_with_scopes(
      shared_state& state, const char* operation) {
    co_await refresh_if_stale(state);
    if (state.stale) co_await read_map(state);  // never read: the walk needs a whole map
    const std::vector<std::vector<std::uint16_t>> by_node = detail::redis_slots_by_node(
        [&state](std::uint16_t slot) { return state.owner[slot]; }, who, operation);
    std::vector<std::uint16_t> found;
    for (std::size_t i = 0; i < by_node.size(); ++i) {
      if (by_node[i].empty()) continue;
      std::vector<detail::redis_wire_command> counts;
      counts.reserve(by_node[i].size());
      for (const std::uint16_t slot : by_node[i]) {
        const std::string registry = state.operations.slot_registry(slot);
        const std::array<std::string_view, 2> words{"SCARD", registry};
        counts.push_back(detail::redis_wire_of(std::span<const std::string_view>(words)));
      }
      std::vector<detail::redis_reply> replies;
      try {
        replies = co_await detail::async_redis_exchange(state.nodes[i].pool, std::move(counts),
                                                        operation, awaitable_token{});
      } catch (const store_error&) {
        state.stale = true;
        throw;
      }
      detail::redis_add_slots_with_scopes(replies, by_node[i], state.operations, operation, found);
    }
    std::sort(found.begin(), found.end());
    co_return found;
  }

  // Runs a walk over one slot's registry, one routed exchange per step.
  template <class Walk>
  static asio::awaitable<void, detail::redis_strand> walk_through(shared_state& state,
                                                                  std::uint16_t slot, Walk& walk,
                                                                  const char* operation) {
    for (detail::redis_step step = walk.next(); !step.done(); step = walk.next()) {
      walk.feed(co_await route(state, slot, detail::redis_wire_of(step), {}, operation));
    }
  }

  // What an operation's call is given: its commands, written out now.
  static constexpr auto to_wire = [](std::span<const detail::redis_command> commands) {
    return detail::redis_wire_of(commands);
  };

  // The decoding of complete, release and checkpoint: whether the fenced write applied.
  struct applied {
    const char* operation;
    bool operator()(const shared_state& state,
                    const std::vector<detail::redis_reply>& replies) const {
      return state.operations.applied(replies, operation);
    }
  };

  std::uint16_t slot_of(std::string_view scope) const {
    return detail::redis_tag_slot(detail::redis_tag_of(scope));
  }

  // One operation of one slot: its commands routed (with WAIT after a write's when writes wait
  // for replicas), the replies decoded by `decode(state, replies)`.
  template <class T, class Token, class Decode>
  auto routed(Token&& token, const char* operation, std::uint16_t slot,
              std::vector<detail::redis_wire_command> wire, bool write, bool claim, Decode decode) {
    std::vector<detail::redis_wire_command> then;
    if (write) {
      for (const std::span<const std::string_view> words :
           state().operations.wait_for_replicas(claim)) {
        then.push_back(detail::redis_wire_of(words));
      }
    }
    return spawn<T>(
        std::forward<Token>(token),
        [state = shared(), operation, slot, wire = std::move(wire), then = std::move(then),
         decode = std::move(decode)]() mutable -> asio::awaitable<T, detail::redis_strand> {
          std::vector<detail::redis_reply> replies =
              co_await route(*state, slot, std::move(wire), std::move(then), operation);
          co_return decode(*state, std::move(replies));
        });
  }

  // The coroutine `body` on the store's strand (detail/async/spawn.hpp says how it completes).
  template <class T, class Token, class Body>
  auto spawn(Token&& token, Body body) {
    const shared_state& on = state();
    return detail::redis_spawn<T>(std::forward<Token>(token), who, on.executor, on.strand, shared(),
                                  std::move(body));
  }

  std::shared_ptr<shared_state> shared() const {
    (void)state();
    return state_;
  }

  shared_state& state() const {
    if (!state_) {
      throw std::logic_error(
          "idem::async_redis_cluster_store: a default-constructed store has no cluster; assign "
          "one made with async_redis_cluster_store(executor, options) first");
    }
    return *state_;
  }

  std::shared_ptr<shared_state> state_;
};

static_assert(AsyncStore<async_redis_cluster_store>);
static_assert(AsyncCheckpointBatchStore<async_redis_cluster_store>);

}  // namespace idem

IDEM_ASIO_CODE_END

#endif  // IDEM_STORE_REDIS_ASYNC_CLUSTER_HPP
