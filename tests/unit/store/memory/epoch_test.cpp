// Epoch reclamation alone: what is retired is freed only once no thread that may have read it
// is still pinned, and then it is freed.
#include <catch2/catch.hpp>

#include <idem/store/memory/detail/epoch.hpp>

#include <atomic>
#include <thread>

using idem::detail::epoch_guard;
using idem::detail::epoch_participant;

namespace {

struct tracked {
  std::atomic<int>* freed;
  ~tracked() { ++*freed; }
};

}  // namespace

TEST_CASE("epoch: a retired object outlives every pin that may have read it",
          "[memory_store][epoch][concurrency]") {
  std::atomic<int> freed{0};
  std::atomic<bool> pinned{false};
  std::atomic<bool> release{false};
  // A reader pinned before the retirement, as a search that may hold a pointer to the object.
  std::thread reader([&] {
    const epoch_guard<> guard;
    pinned = true;
    while (!release)
      std::this_thread::yield();
  });
  while (!pinned)
    std::this_thread::yield();
  {
    epoch_guard<> guard;
    guard.retire(new tracked{&freed});
  }
  for (int i = 0; i < 10; ++i)
    epoch_participant<>::local().collect();
  CHECK(freed == 0);  // the reader is still pinned

  release = true;
  reader.join();
  for (int i = 0; i < 4 && freed == 0; ++i)
    epoch_participant<>::local().collect();
  CHECK(freed == 1);
}

TEST_CASE("epoch: pins nest, and a thread's leftovers are freed after it exits",
          "[memory_store][epoch]") {
  std::atomic<int> freed{0};
  std::thread([&] {
    const epoch_guard<> outer;
    {
      epoch_guard<> inner;  // nested: still one pin
      inner.retire(new tracked{&freed});
    }
  }).join();
  // The exited thread could not free it yet (it was pinned at the retirement's epoch); its
  // leftovers went to the domain, which a later collection frees.
  for (int i = 0; i < 4; ++i)
    epoch_participant<>::local().collect();
  CHECK(freed == 1);
}
