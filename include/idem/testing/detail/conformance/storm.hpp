// The conformance storm: 64 threads on 1,000 keys, one effect per key.
#ifndef IDEM_TESTING_DETAIL_CONFORMANCE_STORM_HPP
#define IDEM_TESTING_DETAIL_CONFORMANCE_STORM_HPP

#ifndef CATCH_VERSION_MAJOR
#error "Include <catch2/catch.hpp> before <idem/testing/store_conformance.hpp>."
#endif

#include <idem/testing/detail/conformance/guarded_cases.hpp>

namespace idem::testing {

namespace conformance {

// 64 threads race over the same 1,000 keys, each in its own order. The effect counter proves
// exactly one effect per key; every other call is a 409 or the identical replay.
template <class Factory>
void a_storm_of_duplicates_has_one_effect_per_key() {
  constexpr int threads = 64;
  constexpr int keys = 1000;
  Factory factory;
  auto store = fresh(factory);
  manual_clock clock;
  auto effects = std::make_shared<std::vector<std::atomic<int>>>(keys);
  struct effect_handler {
    std::shared_ptr<std::vector<std::atomic<int>>> effects;
    std::string operator()(handler_context& context, const std::string& body) const {
      const int index = std::stoi(std::string(context.key().substr(4)));
      (*effects)[static_cast<std::size_t>(index)].fetch_add(1);
      return "response to " + body + " under " + std::string(context.key());
    }
  };
  using policies = wrapped_policies<store_of<Factory>>;
  typename idempotent<effect_handler, policies>::options parts;
  parts.store = store;
  parts.clock = clock;
  idempotent<effect_handler, policies> guarded_effect(effect_handler{effects}, std::move(parts));

  std::atomic<int> executed{0}, replayed{0}, conflicts{0}, wrong{0};
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<int> order(keys);
      for (int i = 0; i < keys; ++i)
        order[static_cast<std::size_t>(i)] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(t)));
      for (const int index : order) {
        const std::string key = std::string("key-").append(std::to_string(index));
        const std::string body = std::string("body-").append(std::to_string(index));
        const auto outcome = guarded_effect("storm", key, body);
        const std::string expected = "response to " + body + " under " + key;
        switch (outcome.verdict()) {
          case verdict::executed:
            ++executed;
            if (outcome.value() != expected) ++wrong;
            break;
          case verdict::replayed:
            ++replayed;
            if (outcome.value() != expected) ++wrong;
            break;
          case verdict::in_progress:
            ++conflicts;
            break;
          default:
            ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : pool)
    thread.join();

  CHECK(wrong == 0);
  CHECK(executed == keys);
  CHECK(executed + replayed + conflicts == threads * keys);
  int not_once = 0;
  for (int i = 0; i < keys; ++i) {
    if ((*effects)[static_cast<std::size_t>(i)] != 1) ++not_once;
    const std::optional<record> found =
        store.find("storm", "key-" + std::to_string(i), clock.wall_now());
    if (!found || found->state != record_state::completed) ++not_once;
  }
  CHECK(not_once == 0);
}

}  // namespace conformance
}  // namespace idem::testing

#endif  // IDEM_TESTING_DETAIL_CONFORMANCE_STORM_HPP
