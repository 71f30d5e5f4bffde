// inbox::deduplicate_batch's machinery: a batch of event ids claimed in one call of the store
// (claim_batch, idem/store/batch.hpp, or one claim per id where the store has no batches), the
// consumer function run for the new ones, and their records completed together: in one
// complete_batch, or for a transactional function in one transaction with its writes
// (complete_batch_within; a TransactionalStore without batches completes each id in a
// transaction of its own).
//
// What each id is answered, in input order:
//   * an id that is_valid_key refuses: invalid_key; the rest of the batch goes on;
//   * the first occurrence of an id: what deduplicate would answer (executed, replayed,
//     in_progress, store_full, store_unavailable, response_too_large); a batch never waits for a
//     live claim (no coalescing): in_progress is answered at once;
//   * a later occurrence of the same id in the batch: the same event, run at most once: replayed
//     with the first occurrence's response when it has one, else the first occurrence's answer.
// A throwing function: the ids whose function already returned are recorded, the one that threw
// and those not yet run are released (so the redelivery runs them), and the exception passes
// through. With a transactional function the whole batch rolls back and every id is released
// (where the store completes each id in a transaction of its own, those committed before the
// throw stay recorded).
#ifndef IDEM_SERVER_DETAIL_BATCH_HPP
#define IDEM_SERVER_DETAIL_BATCH_HPP

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <exception>
#include <functional>
#include <iterator>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <idem/core/codec.hpp>
#include <idem/core/fingerprint/digest.hpp>
#include <idem/core/key.hpp>
#include <idem/server/detail/checks.hpp>
#include <idem/server/detail/held_claim.hpp>
#include <idem/server/failure.hpp>
#include <idem/server/handler_context.hpp>
#include <idem/server/observer.hpp>
#include <idem/server/outcome.hpp>
#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>

namespace idem::detail {

/// The most event ids one deduplicate_batch takes; a longer batch throws std::invalid_argument.
/// Past a few thousand ids a batch gains nothing (the round trip is already paid for) and one
/// statement or pipeline grows without bound.
inline constexpr std::size_t max_inbox_batch = 4096;

// A batch consumer function: R(std::size_t index), or with a TransactionalStore
// R(std::size_t index, Store::transaction&); `index` is the id's position in the batch.
template <class F, class Store>
concept takes_batch_transaction =
    TransactionalStore<Store> && std::invocable<F&, std::size_t, typename Store::transaction&>;

template <class F, class Store>
concept batch_consumer_function =
    takes_batch_transaction<F, Store> || std::invocable<F&, std::size_t>;

template <class F, class Store>
struct batch_consumer_result {
  using type = std::invoke_result_t<F&, std::size_t>;
};
template <class F, class Store>
requires takes_batch_transaction<F, Store>
struct batch_consumer_result<F, Store> {
  using type = std::invoke_result_t<F&, std::size_t, typename Store::transaction&>;
};

template <class F, class Store>
constexpr bool check_batch_consumer() {
  static_assert(batch_consumer_function<F, Store>,
                "idem::inbox::deduplicate_batch: the function must be callable as "
                "R(std::size_t index) or, with a TransactionalStore, "
                "R(std::size_t index, Store::transaction&), where index is the event's position "
                "in the batch and R is void or a storable type.");
  return true;
}

// One id of the batch that this call claimed: where it stands in the batch, and the claim.
struct batch_claim {
  std::size_t index;
  held_claim claim;
};

// Runs one batch on `engine` (inbox's). `run(index, transaction&...)` runs the consumer
// function (and tells the observer); Transactional: it takes the store's transaction.
template <class Response, bool Transactional, class Engine, class Run>
class inbox_batch {
 public:
  using outcome_type = idempotent_outcome<Response>;
  using store_type = std::remove_reference_t<decltype(std::declval<Engine&>().store())>;

  inbox_batch(Engine& engine, std::string_view scope, std::span<const std::string_view> ids,
              Run& run)
      : engine_(engine), scope_(scope), ids_(ids), run_(run), answers_(ids.size()) {}

  std::vector<outcome_type> answer() {
    if (ids_.size() > max_inbox_batch) {
      throw std::invalid_argument("idem::inbox::deduplicate_batch: " + std::to_string(ids_.size()) +
                                  " event ids in one batch, more " + "than the " +
                                  std::to_string(max_inbox_batch) + " allowed; split it");
    }
    const std::vector<std::size_t> distinct = first_occurrences();
    if (!distinct.empty()) {
      std::vector<batch_claim> claimed = claim(distinct);
      if (!claimed.empty()) run_claimed(claimed);
    }
    std::vector<outcome_type> out;
    out.reserve(ids_.size());
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      if (first_[i] == i) {
        out.push_back(std::move(answers_[i]).value());  // every id is answered
      } else {
        const outcome_type& first = out[first_[i]];
        out.push_back(first.has_value() ? outcome_type::replayed(*first) : first);
      }
    }
    return out;
  }

 private:
  // Each id's first occurrence (first_), the invalid ones answered; the valid first
  // occurrences, in the order of their ids: claims and locks are taken in one order by every
  // batch, so two overlapping batches cannot wait on each other in a cycle.
  std::vector<std::size_t> first_occurrences() {
    first_.resize(ids_.size());
    std::unordered_map<std::string_view, std::size_t> seen;
    seen.reserve(ids_.size());
    std::vector<std::size_t> distinct;
    const std::size_t max_length = engine_.options().max_key_length;
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      const auto [at, added] = seen.try_emplace(ids_[i], i);
      first_[i] = at->second;
      if (!added) continue;
      if (!is_valid_key(ids_[i], max_length)) {
        answers_[i] = Engine::template invalid_key<Response>("the event id", max_length);
      } else {
        distinct.push_back(i);
      }
    }
    std::sort(distinct.begin(), distinct.end(),
              [&](std::size_t a, std::size_t b) { return ids_[a] < ids_[b]; });
    return distinct;
  }

  // Claims the distinct ids in one call; answers those it may not run, and returns the claims
  // it won, in input order.
  std::vector<batch_claim> claim(const std::vector<std::size_t>& distinct) {
    std::vector<claim_request> requests;
    requests.reserve(distinct.size());
    store_time now{};
    for (const std::size_t i : distinct) {
      if (requests.empty()) {
        requests.push_back(engine_.claim_request_for(scope_, ids_[i], digest{}, now));
      } else {
        claim_request next = requests.front();
        next.key = ids_[i];
        requests.push_back(next);
      }
    }
    std::vector<claim_result> results;
    try {
      results = claim_batch_of(engine_.store(), std::span<const claim_request>(requests));
    } catch (const store_error& error) {
      for (const std::size_t i : distinct)
        answers_[i] = Engine::template refused<Response>(error);
      return {};
    }
    if (results.size() != requests.size()) {
      throw std::logic_error("idem::inbox::deduplicate_batch: the store's claim_batch answered " +
                             std::to_string(results.size()) + " results for " +
                             std::to_string(requests.size()) + " claims");
    }
    std::vector<batch_claim> claimed;
    for (std::size_t j = 0; j < distinct.size(); ++j) {
      const std::size_t i = distinct[j];
      claim_result& result = results[j];
      switch (result.status) {
        case claim_status::full:
          answers_[i] = Engine::template no_room<Response>();
          break;
        case claim_status::existing:
          answers_[i] = engine_.template answer_existing<Response>(result.existing, digest{}, now);
          break;
        case claim_status::claimed:
        case claim_status::taken_over:
          claimed.push_back(batch_claim{i, engine_.hold(scope_, ids_[i], result, now)});
          break;
      }
    }
    // The function runs in the order the events came in.
    std::sort(claimed.begin(), claimed.end(),
              [](const batch_claim& a, const batch_claim& b) { return a.index < b.index; });
    return claimed;
  }

  void run_claimed(std::vector<batch_claim>& claimed) {
    if constexpr (!Transactional) {
      run_direct(claimed);
    } else if constexpr (TransactionalBatchStore<store_type>) {
      run_in_one_transaction(claimed);
    } else {
      run_each_in_transaction(claimed);
    }
  }

  // Releases the claims from `from` on, after a function threw: their redelivery runs them.
  void release_from(const std::vector<batch_claim>& claimed, std::size_t from) {
    for (std::size_t k = from; k < claimed.size(); ++k) {
      try {
        (void)engine_.store().release(claimed[k].claim.held);
      } catch (const store_error&) {
        // The function's exception is what the caller must see; the claim ends with its lease.
      }
    }
  }

  // The function for each claimed id, then one complete_batch.
  void run_direct(std::vector<batch_claim>& claimed) {
    using bytes_type = typename Engine::completion_bytes;
    std::vector<Response> responses;
    responses.reserve(claimed.size());  // never reallocated: completions view into responses
    std::vector<bytes_type> bytes(claimed.size());
    std::vector<batch_completion> done;
    done.reserve(claimed.size());
    for (std::size_t k = 0; k < claimed.size(); ++k) {
      try {
        responses.push_back(run_(claimed[k].index));
      } catch (...) {
        // What ran is recorded; the rest is released. A store failure here leaves the ids
        // that ran claimed until their lease ends.
        try {
          if (!done.empty()) {
            (void)complete_batch_of(engine_.store(), std::span<const batch_completion>(done),
                                    engine_.completion_time(claimed.front().claim.claimed_at));
          }
        } catch (const store_error&) {
        }
        release_from(claimed, k);
        throw;
      }
      engine_.completion_for(responses[k], bytes[k]);
      done.push_back(batch_completion{claimed[k].claim.held, bytes[k].bytes});
    }
    std::vector<bool> applied;
    try {
      applied = complete_batch_of(engine_.store(), std::span<const batch_completion>(done),
                                  engine_.completion_time(claimed.front().claim.claimed_at));
    } catch (const store_error& error) {
      for (std::size_t k = 0; k < claimed.size(); ++k) {
        answers_[claimed[k].index] =
            Engine::not_stored(claimed[k].claim, std::move(responses[k]), error);
      }
      return;
    }
    for (std::size_t k = 0; k < claimed.size(); ++k) {
      const batch_claim& each = claimed[k];
      if (k < applied.size() && applied[k]) {
        answers_[each.index] = engine_.recorded(each.claim, std::move(responses[k]), bytes[k]);
      } else {
        answers_[each.index] =
            engine_.template answer_lost<Response>(scope_, ids_[each.index], digest{});
      }
    }
  }

  // A TransactionalBatchStore: every function in one transaction that completes every record.
  void run_in_one_transaction(std::vector<batch_claim>& claimed) {
    using transaction_type = typename store_type::transaction;
    using bytes_type = typename Engine::completion_bytes;
    std::vector<fenced_key> held;
    held.reserve(claimed.size());
    for (const batch_claim& each : claimed)
      held.push_back(each.claim.held);
    std::vector<std::optional<Response>> responses(claimed.size());
    std::vector<bytes_type> bytes(claimed.size());
    bool running = false;
    auto produce = [&](transaction_type& transaction, std::size_t k) -> std::string {
      responses[k].reset();
      bytes[k] = bytes_type{};
      running = true;
      responses[k].emplace(run_(claimed[k].index, transaction));
      running = false;
      engine_.completion_for(*responses[k], bytes[k]);
      return std::string(bytes[k].bytes);
    };
    std::vector<bool> applied;
    try {
      applied = engine_.store().complete_batch_within(
          std::span<const fenced_key>(held),
          engine_.completion_time(claimed.front().claim.claimed_at), produce);
    } catch (const store_error& error) {
      if (running) {
        release_from(claimed, 0);
        throw;
      }
      // Rolled back, or a commit whose answer was lost: the claims stay until their leases end
      // (a release could undo a commit that went through).
      for (const batch_claim& each : claimed) {
        answers_[each.index] = Engine::template refused<Response>(
            error, "the consumer's transaction did not commit: ");
      }
      return;
    } catch (...) {
      release_from(claimed, 0);
      throw;
    }
    for (std::size_t k = 0; k < claimed.size(); ++k) {
      const batch_claim& each = claimed[k];
      if (k < applied.size() && applied[k] && responses[k]) {
        answers_[each.index] = engine_.recorded(each.claim, std::move(*responses[k]), bytes[k]);
      } else {
        answers_[each.index] =
            engine_.template answer_lost<Response>(scope_, ids_[each.index], digest{});
      }
    }
  }

  // A TransactionalStore without batches: each id in a transaction of its own.
  void run_each_in_transaction(std::vector<batch_claim>& claimed) {
    for (std::size_t k = 0; k < claimed.size(); ++k) {
      const std::size_t index = claimed[k].index;
      auto one = [&](handler_context&, auto& transaction) -> Response {
        return run_(index, transaction);
      };
      try {
        answers_[index] = engine_.template run_claimed<Response, completion::in_transaction>(
            std::move(claimed[k].claim), digest{}, one, release_on_failure{});
      } catch (...) {
        release_from(claimed, k + 1);
        throw;
      }
    }
  }

  Engine& engine_;
  std::string_view scope_;
  std::span<const std::string_view> ids_;
  Run& run_;
  std::vector<std::optional<outcome_type>> answers_;
  std::vector<std::size_t> first_;
};

// What a void function's call answers: std::monostate; else its result.
template <class Response, class Call>
Response batch_answer_of(Call&& call) {
  if constexpr (std::is_void_v<decltype(call())>) {
    call();
    return {};
  } else {
    return call();
  }
}

/// inbox::deduplicate_batch: the checks, then the batch. `observer`, when Observes, hears each
/// run of `fn` and each id's verdict.
template <bool Observes, class Engine, class Observer, class Ids, class F>
auto deduplicate_batch(Engine& engine, Observer& observer, std::string_view scope,
                       const Ids& event_ids, F& fn) {
  using store_type = std::remove_reference_t<decltype(engine.store())>;
  static_assert(check_batch_consumer<F, store_type>());
  if constexpr (batch_consumer_function<F, store_type>) {
    using response_type = consumer_response_t<typename batch_consumer_result<F, store_type>::type>;
    static_assert(check_consumer_response<response_type>());
    if constexpr (Encodable<response_type>) {
      static_assert(std::copy_constructible<response_type>,
                    "idem::inbox::deduplicate_batch: the function's result must be copyable: a "
                    "duplicate of an event in the same batch replays a copy of it.");
      std::vector<std::string_view> ids;
      if constexpr (requires { std::size(event_ids); }) ids.reserve(std::size(event_ids));
      for (const auto& id : event_ids)
        ids.push_back(std::string_view(id));
      const auto start = engine.clock().now();
      const auto since = [&](auto from) {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(engine.clock().now() - from);
      };
      auto run = [&](std::size_t index, auto&... transaction) -> response_type {
        auto call = [&]() -> decltype(auto) { return std::invoke(fn, index, transaction...); };
        if constexpr (Observes) {
          const auto began = engine.clock().now();
          try {
            response_type response = batch_answer_of<response_type>(call);
            observer.on_handler(handler_event{since(began), false});
            return response;
          } catch (...) {
            observer.on_handler(handler_event{since(began), true});
            throw;
          }
        } else {
          return batch_answer_of<response_type>(call);
        }
      };
      constexpr bool transactional = takes_batch_transaction<F, store_type>;
      inbox_batch<response_type, transactional, Engine, decltype(run)> batch(engine, scope, ids,
                                                                             run);
      std::vector<idempotent_outcome<response_type>> outcomes = batch.answer();
      if constexpr (Observes) {
        const std::chrono::nanoseconds took = since(start);
        for (const auto& outcome : outcomes) {
          observer.on_call(server_call_event{outcome.verdict(), false, took});
        }
      } else {
        (void)start;
      }
      return outcomes;
    }
  }
}

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_BATCH_HPP
