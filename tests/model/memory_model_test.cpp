// memory_store against the locked_store model, and proof that the model test can fail: stores
// broken on purpose (the fence check dropped, the scope ignored, a takeover that ignores the
// lease) must each be caught within the same bounded budget the real stores run under.
#include <catch2/catch.hpp>

#include <idem/store/locked.hpp>
#include <idem/store/memory.hpp>

#include "store_model.hpp"

namespace model = idem::testing::model;

namespace {

idem::memory_store small_memory_store() {
  idem::memory_store::options bounds;
  bounds.expected_records = 16;  // a handful of keys: small bucket arrays, cheap stuck()
  return idem::memory_store{bounds};
}

// Broken on purpose: complete, release and checkpoint use whatever fence the record has now,
// as a store that forgot the `WHERE fence = $n` would.
template <idem::Store Inner>
struct fence_ignored {
  Inner inner;
  idem::claim_result claim(const idem::claim_request& r) { return inner.claim(r); }
  bool complete(const idem::fenced_key& held, std::string_view bytes, idem::store_time now) {
    return inner.complete(current(held, now), bytes, now);
  }
  bool release(const idem::fenced_key& held) {
    return inner.release(current(held, idem::store_time::min()));
  }
  bool checkpoint(const idem::fenced_key& held, std::string_view bytes, idem::store_time until) {
    return inner.checkpoint(current(held, idem::store_time::min()), bytes, until);
  }
  std::optional<idem::record> find(std::string_view s, std::string_view k, idem::store_time now) {
    return inner.find(s, k, now);
  }
  std::size_t sweep(idem::store_time now) { return inner.sweep(now); }
  std::vector<idem::record> stuck(idem::store_time now, std::size_t limit) {
    return inner.stuck(now, limit);
  }

 private:
  idem::fenced_key current(const idem::fenced_key& held, idem::store_time now) {
    const auto found = inner.find(held.scope, held.key, now);
    return found ? idem::fenced_key{held.scope, held.key, found->fence} : held;
  }
};

// Broken on purpose: every scope is the empty one (a shared fallback scope).
template <idem::Store Inner>
struct scope_ignored {
  Inner inner;
  idem::claim_result claim(idem::claim_request r) {
    r.scope = {};
    return inner.claim(r);
  }
  bool complete(idem::fenced_key held, std::string_view bytes, idem::store_time now) {
    held.scope = {};
    return inner.complete(held, bytes, now);
  }
  bool release(idem::fenced_key held) {
    held.scope = {};
    return inner.release(held);
  }
  bool checkpoint(idem::fenced_key held, std::string_view bytes, idem::store_time until) {
    held.scope = {};
    return inner.checkpoint(held, bytes, until);
  }
  std::optional<idem::record> find(std::string_view s, std::string_view k, idem::store_time now) {
    auto found = inner.find({}, k, now);
    if (found) found->scope = s;  // hide the sharing from a comparison of scopes
    return found;
  }
  std::size_t sweep(idem::store_time now) { return inner.sweep(now); }
  std::vector<idem::record> stuck(idem::store_time now, std::size_t limit) {
    return inner.stuck(now, limit);
  }
};

// Broken on purpose: a claim may take over a live lease (it asks as if the lease were over).
template <idem::Store Inner>
struct lease_ignored {
  Inner inner;
  idem::claim_result claim(idem::claim_request r) {
    const auto found = inner.find(r.scope, r.key, r.now);
    if (found && found->state == idem::record_state::in_progress && r.now < found->lease_until) {
      const idem::store_time asked = r.now;
      r.now = found->lease_until;
      r.lease += asked - r.now;  // keep lease_until = asked + lease
    }
    return inner.claim(r);
  }
  bool complete(const idem::fenced_key& held, std::string_view bytes, idem::store_time now) {
    return inner.complete(held, bytes, now);
  }
  bool release(const idem::fenced_key& held) { return inner.release(held); }
  bool checkpoint(const idem::fenced_key& held, std::string_view bytes, idem::store_time until) {
    return inner.checkpoint(held, bytes, until);
  }
  std::optional<idem::record> find(std::string_view s, std::string_view k, idem::store_time now) {
    return inner.find(s, k, now);
  }
  std::size_t sweep(idem::store_time now) { return inner.sweep(now); }
  std::vector<idem::record> stuck(idem::store_time now, std::size_t limit) {
    return inner.stuck(now, limit);
  }
};

template <class Make>
bool caught(Make make) {
  const rc::detail::TestResult result = model::check_against_model(std::move(make));
  if (result.is<rc::detail::FailureResult>()) {
    const auto& failure = result.get<rc::detail::FailureResult>();
    INFO("caught after " << failure.numSuccess << " passing sequences:\n" << failure.description);
    SUCCEED();
    return true;
  }
  return false;
}

}  // namespace

TEST_CASE("memory_store answers every operation sequence as the locked_store model does",
          "[model]") {
  // In memory a sequence costs microseconds: a larger budget than the durable stores get.
  model::require_model_agreement(&small_memory_store, model::budget{1000, 100});
}

TEST_CASE("memory_store caps each scope's records as the model does", "[model]") {
  model::budget capped{1000, 100};
  capped.scope_cap = 2;  // three keys a scope: the third claim of a scope finds it full
  model::require_model_agreement(
      [] {
        idem::memory_store::options bounds;
        bounds.expected_records = 16;
        bounds.max_records_per_scope = 2;
        return idem::memory_store{bounds};
      },
      capped);
}

TEST_CASE("the model itself agrees with a second locked_store", "[model]") {
  model::require_model_agreement([] { return idem::locked_store{}; });
}

TEST_CASE("the model test catches a store that ignores the fence", "[model]") {
  CHECK(caught([] { return fence_ignored<idem::memory_store>{small_memory_store()}; }));
}

TEST_CASE("the model test catches a store that shares one scope between all", "[model]") {
  CHECK(caught([] { return scope_ignored<idem::memory_store>{small_memory_store()}; }));
}

TEST_CASE("the model test catches a store that takes over a live lease", "[model]") {
  CHECK(caught([] { return lease_ignored<idem::memory_store>{small_memory_store()}; }));
}
