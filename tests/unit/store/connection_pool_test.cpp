// detail::connection_pool, the pool the durable stores share, with a fake connection: real
// threads, no client library.
#include <catch2/catch.hpp>

#include <idem/store/detail/connection_pool.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

// What the fake connections have seen: how many exist now, the most that ever existed at once,
// and how many were opened.
struct census {
  std::atomic<int> alive{0};
  std::atomic<int> most{0};
  std::atomic<int> opened{0};
};

struct fake_connection {
  fake_connection(census& counts, int number) : counts(&counts), id(number) {
    const int now = ++counts.alive;
    int seen = counts.most.load();
    while (now > seen && !counts.most.compare_exchange_weak(seen, now)) {
    }
  }
  fake_connection(const fake_connection&) = delete;
  fake_connection& operator=(const fake_connection&) = delete;
  ~fake_connection() { --counts->alive; }

  census* counts;
  int id;
  bool in_transaction = false;
  bool dead = false;
};

using handle = std::unique_ptr<fake_connection>;
using pool = idem::detail::connection_pool<handle>;

pool::hooks hooks_for(census& counts) {
  pool::hooks hooks;
  hooks.open = [&counts] { return std::make_unique<fake_connection>(counts, ++counts.opened); };
  hooks.reusable = [](handle& connection) { return !connection->in_transaction; };
  hooks.alive = [](handle& connection) { return !connection->dead; };
  return hooks;
}

}  // namespace

TEST_CASE("a pool opens connections only as calls need them", "[connection_pool]") {
  census counts;
  pool connections{4, hooks_for(counts)};
  CHECK(counts.opened == 0);
  {
    pool::lease first = connections.acquire();
    CHECK(counts.opened == 1);
    CHECK_FALSE(first.reused());
  }
  CHECK(counts.alive == 1);
}

TEST_CASE("a connection given back is lent again, the most recent first", "[connection_pool]") {
  census counts;
  pool connections{4, hooks_for(counts)};
  int first_id = 0;
  int second_id = 0;
  {
    pool::lease first = connections.acquire();
    pool::lease second = connections.acquire();
    first_id = first.get()->id;
    second_id = second.get()->id;
    first.give_back();
    CHECK_FALSE(first.held());
  }
  pool::lease again = connections.acquire();
  CHECK(again.reused());
  CHECK(again.get()->id == second_id);
  pool::lease other = connections.acquire();
  CHECK(other.get()->id == first_id);
  CHECK(counts.opened == 2);
}

TEST_CASE("a discarded connection is closed and never lent again", "[connection_pool]") {
  census counts;
  pool connections{1, hooks_for(counts)};
  int broken_id = 0;
  {
    pool::lease broken = connections.acquire();
    broken_id = broken.get()->id;
    broken.discard();
    CHECK_FALSE(broken.held());
    CHECK(counts.alive == 0);
  }
  pool::lease fresh = connections.acquire();
  CHECK(fresh.get()->id != broken_id);
  CHECK_FALSE(fresh.reused());
}

TEST_CASE("a connection the adapter finds unfit on its way back is closed", "[connection_pool]") {
  census counts;
  pool connections{2, hooks_for(counts)};
  int stuck_id = 0;
  {
    pool::lease stuck = connections.acquire();
    stuck_id = stuck.get()->id;
    stuck.get()->in_transaction = true;
  }
  CHECK(counts.alive == 0);
  pool::lease fresh = connections.acquire();
  CHECK(fresh.get()->id != stuck_id);
}

TEST_CASE("an idle connection that died meanwhile is dropped when taken", "[connection_pool]") {
  census counts;
  pool connections{1, hooks_for(counts)};
  fake_connection* idle = nullptr;
  int dead_id = 0;
  {
    pool::lease first = connections.acquire();
    idle = first.get().get();
    dead_id = idle->id;
  }
  idle->dead = true;  // the server closed it while it sat in the pool
  pool::lease next = connections.acquire();
  CHECK(next.get()->id != dead_id);
  CHECK_FALSE(next.reused());
  CHECK(counts.alive == 1);
}

TEST_CASE("a connection that fails to open frees its place", "[connection_pool]") {
  census counts;
  bool refuse = true;
  pool::hooks hooks = hooks_for(counts);
  hooks.open = [&] {
    if (refuse) throw std::runtime_error("server down");
    return std::make_unique<fake_connection>(counts, ++counts.opened);
  };
  pool connections{1, hooks};
  CHECK_THROWS_WITH(connections.acquire(), "server down");
  refuse = false;
  // With the place leaked, this would wait forever for a connection that never existed.
  CHECK(connections.acquire_for(1s).held());
}

TEST_CASE("a call that finds every connection out waits for one to come back",
          "[connection_pool]") {
  census counts;
  pool connections{1, hooks_for(counts)};
  pool::lease held = connections.acquire();
  const int held_id = held.get()->id;
  std::atomic<bool> got{false};
  int got_id = 0;
  std::thread waiter([&] {
    pool::lease mine = connections.acquire();
    got_id = mine.get()->id;
    got = true;
  });
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(got);
  held.give_back();
  waiter.join();
  CHECK(got);
  CHECK(got_id == held_id);
  CHECK(counts.opened == 1);
}

TEST_CASE("a waiter gets a fresh connection when a lent one is discarded", "[connection_pool]") {
  census counts;
  pool connections{1, hooks_for(counts)};
  pool::lease held = connections.acquire();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    pool::lease mine = connections.acquire();
    got = true;
  });
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(got);
  held.discard();
  waiter.join();
  CHECK(got);
  CHECK(counts.opened == 2);
}

TEST_CASE("acquire_for gives up when no connection comes back in time", "[connection_pool]") {
  census counts;
  pool connections{1, hooks_for(counts)};
  pool::lease held = connections.acquire();
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(connections.acquire_for(30ms).held());
  CHECK(std::chrono::steady_clock::now() - start >= 30ms);
}

TEST_CASE("discard_all closes the idle connections and, as they come back, the lent ones",
          "[connection_pool]") {
  census counts;
  pool connections{4, hooks_for(counts)};
  {
    pool::lease a = connections.acquire();
    pool::lease b = connections.acquire();
  }
  CHECK(counts.alive == 2);  // both idle now
  pool::lease failed = connections.acquire();
  pool::lease older = connections.acquire();
  pool::lease idle_one = connections.acquire();  // a third, opened before the failure
  idle_one.give_back();
  CHECK(counts.alive == 3);
  failed.discard_all();
  CHECK(counts.alive == 1);  // only `older`, still lent
  older.give_back();         // from before the failure: closed, not pooled
  CHECK(counts.alive == 0);
  pool::lease fresh = connections.acquire();
  CHECK_FALSE(fresh.reused());
  fresh.give_back();
  pool::lease again = connections.acquire();
  CHECK(again.reused());  // connections opened after the failure are pooled as usual
}

TEST_CASE("threads never hold more connections than the pool's size",
          "[connection_pool][concurrency]") {
  census counts;
  constexpr std::size_t size = 3;
  pool connections{size, hooks_for(counts)};
  std::atomic<int> out{0};
  std::atomic<int> most_out{0};
  std::atomic<int> shared_use{0};
  constexpr int threads = 8;
  constexpr int rounds = 300;
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        pool::lease lease = connections.acquire();
        const int now = ++out;
        int seen = most_out.load();
        while (now > seen && !most_out.compare_exchange_weak(seen, now)) {
        }
        // One user at a time: a connection lent twice at once would be seen here.
        fake_connection& connection = *lease.get();
        if (connection.in_transaction) ++shared_use;
        connection.in_transaction = true;
        std::this_thread::yield();
        connection.in_transaction = false;
        --out;
        // Some calls break their connection, or the server: the bound holds through both.
        if ((i + t) % 17 == 0) {
          lease.discard();
        } else if ((i * 7 + t) % 101 == 0) {
          lease.discard_all();
        }
      }
    });
  }
  for (std::thread& worker : workers)
    worker.join();
  CHECK(shared_use == 0);
  CHECK(most_out <= static_cast<int>(size));
  CHECK(counts.most <= static_cast<int>(size));
  CHECK(counts.alive <= static_cast<int>(size));
}
