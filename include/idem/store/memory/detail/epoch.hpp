// Epoch-based memory reclamation: when a lock-free structure may free what it unlinked.
//
// A reader pins the current global epoch for the length of one operation (an epoch_guard); a
// writer that unlinks an object retires it, tagged with the epoch at that moment. The global
// epoch advances only when every pinned thread has seen it, so once it has moved two steps past
// an object's tag, no thread can still hold a pointer it read before the unlink: the object is
// freed then. Readers never write shared memory except their own slot, and a thread paused
// inside an operation only delays reclamation; it never blocks another thread's progress.
//
// One domain for the process: thread slots are registered once and reused after a thread
// exits, and what a thread retired but could not free yet is handed to the domain at exit and
// freed by later passes (or when the process ends).
//
// Templates whose parameter means nothing, so that they compile only where the memory store is
// used (idem/core/detail/lazy.hpp): epoch_guard<> is the guard.
#ifndef IDEM_STORE_MEMORY_DETAIL_EPOCH_HPP
#define IDEM_STORE_MEMORY_DETAIL_EPOCH_HPP

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace idem::detail {

template <class Lazy = void>
class epoch_domain {
 public:
  struct retired {
    void* object;
    void (*destroy)(void*);
    std::uint64_t epoch;
  };

  // One per thread that ever pinned. `state` is 0 when the thread is outside any operation,
  // else (epoch << 1) | 1.
  struct slot {
    std::atomic<std::uint64_t> state{0};
    std::atomic<bool> in_use{true};
    slot* next = nullptr;
  };

  static epoch_domain& instance() {
    // Never destroyed: threads may still retire while static destructors run.
    static epoch_domain* domain = new epoch_domain();
    return *domain;
  }

  slot* acquire_slot() {
    for (slot* s = slots_.load(std::memory_order_acquire); s != nullptr; s = s->next) {
      bool free = false;
      if (!s->in_use.load(std::memory_order_relaxed) &&
          s->in_use.compare_exchange_strong(free, true, std::memory_order_acq_rel)) {
        return s;
      }
    }
    auto* fresh = new slot();
    slot* head = slots_.load(std::memory_order_relaxed);
    do {
      fresh->next = head;
    } while (!slots_.compare_exchange_weak(head, fresh, std::memory_order_acq_rel,
                                           std::memory_order_relaxed));
    return fresh;
  }

  std::uint64_t current() const noexcept { return epoch_.load(std::memory_order_acquire); }
  std::uint64_t current_seq_cst() const noexcept { return epoch_.load(std::memory_order_seq_cst); }

  // Advances the global epoch if every pinned thread has caught up with it.
  std::uint64_t try_advance() noexcept {
    const std::uint64_t epoch = epoch_.load(std::memory_order_seq_cst);
    for (slot* s = slots_.load(std::memory_order_acquire); s != nullptr; s = s->next) {
      const std::uint64_t state = s->state.load(std::memory_order_seq_cst);
      if ((state & 1) != 0 && (state >> 1) != epoch) return epoch;
    }
    std::uint64_t expected = epoch;
    epoch_.compare_exchange_strong(expected, epoch + 1, std::memory_order_seq_cst);
    return epoch_.load(std::memory_order_seq_cst);
  }

  // What exiting threads could not free yet.
  void adopt(std::vector<retired>& leftovers) {
    const std::lock_guard lock(orphans_mutex_);
    for (const retired& item : leftovers)
      orphans_.push_back(item);
    leftovers.clear();
  }

  void free_orphans(std::uint64_t safe_before) {
    std::unique_lock lock(orphans_mutex_, std::try_to_lock);
    if (!lock.owns_lock() || orphans_.empty()) return;
    free_older(orphans_, safe_before);
  }

  static void free_older(std::vector<retired>& list, std::uint64_t safe_before) {
    std::size_t kept = 0;
    for (const retired& item : list) {
      if (item.epoch < safe_before) {
        item.destroy(item.object);
      } else {
        list[kept++] = item;
      }
    }
    list.resize(kept);
  }

 private:
  epoch_domain() = default;

  std::atomic<std::uint64_t> epoch_{2};
  std::atomic<slot*> slots_{nullptr};
  std::mutex orphans_mutex_;
  std::vector<retired> orphans_;
};

// A thread's membership: its slot, and what it retired and has not freed yet.
template <class Lazy = void>
class epoch_participant {
  using domain_type = epoch_domain<Lazy>;

 public:
  static constexpr std::size_t collect_every = 64;

  epoch_participant() : slot_(domain_type::instance().acquire_slot()) {}
  ~epoch_participant() {
    domain_type& domain = domain_type::instance();
    domain.try_advance();
    domain_type::free_older(retired_, domain.current() - 1);
    if (!retired_.empty()) domain.adopt(retired_);
    slot_->state.store(0, std::memory_order_release);
    slot_->in_use.store(false, std::memory_order_release);
  }
  epoch_participant(const epoch_participant&) = delete;
  epoch_participant& operator=(const epoch_participant&) = delete;

  static epoch_participant& local() {
    thread_local epoch_participant participant;
    return participant;
  }

  void pin() noexcept {
    if (depth_++ > 0) return;
    domain_type& domain = domain_type::instance();
    std::uint64_t epoch = domain.current();
    // Publish the pin, then check the epoch did not move meanwhile: an advance that scanned the
    // slots before the pin was visible could otherwise leave this thread pinned two epochs
    // behind. seq_cst orders the publication before every load of the structure that follows.
    for (;;) {
      slot_->state.store((epoch << 1) | 1, std::memory_order_seq_cst);
      const std::uint64_t now = domain_type::instance().current_seq_cst();
      if (now == epoch) break;
      epoch = now;
    }
    pinned_ = epoch;
  }
  void unpin() noexcept {
    if (--depth_ > 0) return;
    slot_->state.store(0, std::memory_order_release);
  }

  // Called while pinned. While this thread is pinned at p the global epoch is p or p + 1, so p + 1
  // is a tag no smaller than the epoch at the moment of the unlink.
  void retire(void* object, void (*destroy)(void*)) {
    retired_.push_back({object, destroy, pinned_ + 1});
    if (retired_.size() >= next_collect_) collect();
  }

  void collect() {
    domain_type& domain = domain_type::instance();
    const std::uint64_t epoch = domain.try_advance();
    // Tagged at e, an object may still be seen by a thread pinned at e; every such thread has
    // unpinned once the epoch reached e + 2.
    const std::size_t held = retired_.size();
    domain_type::free_older(retired_, epoch - 1);
    domain.free_orphans(epoch - 1);
    // Each collection advances the epoch by at most one step, so what it frees was retired two
    // collections ago: collecting every collect_every retirements keeps the list near three
    // batches and frees one batch each time. While some thread stays pinned nothing can be
    // freed; then collecting again only once the list has doubled keeps retire amortised O(1)
    // instead of rescanning the list every time.
    next_collect_ = retired_.size() < held ? retired_.size() + collect_every
                                           : std::max(collect_every, 2 * retired_.size());
    // A burst of retirements grows the list; give the memory back once it has drained.
    if (retired_.capacity() > 4 * next_collect_) retired_.shrink_to_fit();
  }

 private:
  typename domain_type::slot* slot_;
  int depth_ = 0;
  std::uint64_t pinned_ = 0;
  std::size_t next_collect_ = collect_every;
  std::vector<typename domain_type::retired> retired_;
};

// Pins the calling thread for one operation.
template <class Lazy = void>
class epoch_guard {
 public:
  epoch_guard() noexcept : participant_(epoch_participant<Lazy>::local()) { participant_.pin(); }
  ~epoch_guard() { participant_.unpin(); }
  epoch_guard(const epoch_guard&) = delete;
  epoch_guard& operator=(const epoch_guard&) = delete;

  template <class T>
  void retire(T* object) {
    participant_.retire(object, [](void* p) { delete static_cast<T*>(p); });
  }
  void retire(void* object, void (*destroy)(void*)) { participant_.retire(object, destroy); }

 private:
  epoch_participant<Lazy>& participant_;
};

}  // namespace idem::detail

#endif  // IDEM_STORE_MEMORY_DETAIL_EPOCH_HPP
