// sqlite_store's group commit: concurrent writes from many threads of one process share one
// write transaction, so that with synchronous = full a group of operations costs one fsync, not
// one each. On only when sqlite_store::options::group_commit.enabled is set.
//
// How a group forms (no timer by default): an operation that finds no group being committed
// becomes the leader and commits at once, alone. Operations that arrive while a leader commits
// queue up; when it is done, the first of them leads the next group and takes every operation
// queued by then (up to max_operations). So one thread pays nothing but a mutex, and N threads
// wait at most about one commit longer than they would have waited for SQLite's write lock.
//
// What each operation keeps:
//   * Its own semantics: the leader runs the operations one after another, in the order they
//     queued, each on the same connection inside the group's transaction (BEGIN IMMEDIATE), as
//     if each were its own transaction run in that order. An operation reads what the ones
//     before it in the group wrote.
//   * Its own atomicity: each runs in a SAVEPOINT. One that throws (store_error full, a
//     constraint) is rolled back to its savepoint alone, and its caller gets its exception; the
//     others go on and commit.
//   * Durability before the answer: a caller is answered (its result or its exception) only
//     after the group's COMMIT returned, so with synchronous = full its write is on disk when
//     its call returns. If BEGIN or COMMIT fails, or SQLite rolls the whole transaction back
//     after an operation's error, every operation of the group throws store_error (the
//     failure SQLite's error deserves: unavailable, or full for a full disk) and nothing of the
//     group is written.
// complete_within does not join groups: its transaction runs the handler's own code.
#ifndef IDEM_STORE_SQLITE_GROUP_COMMIT_HPP
#define IDEM_STORE_SQLITE_GROUP_COMMIT_HPP

#include <sqlite3.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <idem/store/contract.hpp>
#include <idem/store/sqlite/detail/bounds.hpp>
#include <idem/store/sqlite/detail/connection.hpp>
#include <idem/store/sqlite/detail/record.hpp>
#include <idem/store/sqlite/detail/statements.hpp>

namespace idem {

/// sqlite_store::options::group_commit: whether concurrent writes share commits, and how.
struct sqlite_group_commit_options {
  /// Off by default: every claim, complete, release and checkpoint commits on its own.
  bool enabled = false;
  /// The most operations one group commits (1 to 100,000); the rest wait for the next group.
  std::size_t max_operations = 256;
  /// How long a leader waits for more operations to join before it begins, while fewer than
  /// max_operations are queued (0 to 1 s). 0, the default: no wait; a group is whatever queued
  /// while the previous one committed, which is all the grouping a busy store needs.
  std::chrono::microseconds max_wait{0};
};

/// What group commit has done since the store was opened (sqlite_store::group_commit_stats).
struct sqlite_group_commit_stats {
  /// Group transactions committed.
  std::uint64_t groups = 0;
  /// Operations answered from them (failed ones included: they were rolled back alone).
  std::uint64_t operations = 0;
};

namespace detail {

inline void sqlite_check_group_commit(const sqlite_group_commit_options& options) {
  if (options.max_operations == 0 || options.max_operations > 100000) {
    throw std::invalid_argument(
        "idem::sqlite_store: group_commit.max_operations must be 1 to 100000, not " +
        std::to_string(options.max_operations));
  }
  if (options.max_wait < std::chrono::microseconds::zero() ||
      options.max_wait > std::chrono::seconds{1}) {
    throw std::invalid_argument("idem::sqlite_store: group_commit.max_wait must be 0 to 1 s, not " +
                                std::to_string(options.max_wait.count()) + " us");
  }
}

// complete, release and checkpoint as a group's operations: the same statements as
// sqlite_store's own, inside the group's savepoint. `bounds` is null for an unbounded store.
// one_statement(): the operation is one write statement, which SQLite runs atomically on its
// own, so a group of one such operation needs no BEGIN and COMMIT around it.
struct sqlite_group_complete {
  const sqlite_bounds* bounds;
  const fenced_key& held;
  std::string_view response;
  bool one_statement() const noexcept { return bounds == nullptr; }
  bool operator()(sqlite_connection& c) const {
    if (bounds != nullptr) {
      const std::optional<sqlite_held_size> sizes = sqlite_held_sizes(c, held);
      if (!sizes) return false;
      sqlite_reserve_bytes(c, *bounds, response.size(), sizes->response + sizes->recovery);
    }
    return sqlite_fenced_write(c, sqlite_statement::complete, held, response);
  }
};

struct sqlite_group_release {
  const fenced_key& held;
  static bool one_statement() noexcept { return true; }
  bool operator()(sqlite_connection& c) const {
    return sqlite_fenced_write(c, sqlite_statement::release, held, {});
  }
};

struct sqlite_group_checkpoint {
  const sqlite_bounds* bounds;
  const fenced_key& held;
  std::string_view recovery;
  store_time lease_until;
  bool one_statement() const noexcept { return bounds == nullptr; }
  bool operator()(sqlite_connection& c) const {
    if (bounds != nullptr)
      return sqlite_bounded_checkpoint(c, *bounds, held, recovery, lease_until);
    return sqlite_fenced_write(c, sqlite_statement::checkpoint, held, recovery, lease_until);
  }
};

// The queue and its leader. One per store; shared by its copies.
class sqlite_group_committer {
 public:
  explicit sqlite_group_committer(const sqlite_group_commit_options& options) : options_(options) {}
  sqlite_group_committer(const sqlite_group_committer&) = delete;
  sqlite_group_committer& operator=(const sqlite_group_committer&) = delete;

  bool enabled() const noexcept { return options_.enabled; }

  sqlite_group_commit_stats stats() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  // Runs `operation(sqlite_connection&)` in the next group and answers what it answered, once
  // the group committed; throws what it threw, or the group's failure. `acquire()` lends a
  // connection (a pool lease whose get() is a pointer to it) when this thread leads.
  template <class Acquire, class Operation>
  std::invoke_result_t<Operation&, sqlite_connection&> run(Acquire& acquire, Operation& operation) {
    using result_type = std::invoke_result_t<Operation&, sqlite_connection&>;
    struct frame {
      Operation* operation;
      std::optional<result_type> result;
    } mine{&operation, std::nullopt};
    pending op;
    if constexpr (requires { operation.one_statement(); }) {
      op.one_statement = operation.one_statement();
    }
    op.context = &mine;
    op.invoke = [](void* context, sqlite_connection& c) {
      auto& self = *static_cast<frame*>(context);
      self.result.emplace((*self.operation)(c));
    };
    {
      std::unique_lock<std::mutex> lock(mutex_);
      enqueue(op);
      if (leading_) {
        op.wake.wait(lock, [&] { return op.done || op.lead; });
      } else {
        leading_ = true;
        op.lead = true;
      }
      if (!op.done) lead(lock, acquire);
    }
    if (op.error) std::rethrow_exception(op.error);
    return std::move(*mine.result);
  }

 private:
  // One queued operation; lives in its caller's frame until the caller is answered.
  struct pending {
    void (*invoke)(void*, sqlite_connection&) = nullptr;
    void* context = nullptr;
    pending* next = nullptr;
    std::exception_ptr error;
    bool one_statement = false;
    bool failed_alone = false;
    bool done = false;
    bool lead = false;
    std::condition_variable wake;
  };

  void enqueue(pending& op) {
    if (tail_ == nullptr) {
      head_ = &op;
    } else {
      tail_->next = &op;
    }
    tail_ = &op;
    ++queued_;
    if (queued_ >= options_.max_operations) arrived_.notify_one();
  }

  // With the lock held, by the thread whose operation is at the head of the queue.
  template <class Acquire>
  void lead(std::unique_lock<std::mutex>& lock, Acquire& acquire) {
    if (options_.max_wait > std::chrono::microseconds::zero() &&
        queued_ < options_.max_operations) {
      arrived_.wait_for(lock, options_.max_wait,
                        [&] { return queued_ >= options_.max_operations; });
    }
    pending* const first = head_;
    pending* last = first;
    std::size_t taken = 1;
    while (taken < options_.max_operations && last->next != nullptr) {
      last = last->next;
      ++taken;
    }
    head_ = last->next;
    if (head_ == nullptr) tail_ = nullptr;
    last->next = nullptr;
    queued_ -= taken;
    lock.unlock();
    const bool committed = commit_group(first, acquire);
    lock.lock();
    if (committed) {
      ++stats_.groups;
      stats_.operations += taken;
    }
    // Answer the group. Each follower wakes only once we let the lock go, so `op` is alive
    // while we touch it; `next` is read before `done` lets it go.
    for (pending* op = first; op != nullptr;) {
      pending* const next = op->next;
      op->done = true;
      op->wake.notify_one();
      op = next;
    }
    if (head_ != nullptr) {
      head_->lead = true;
      head_->wake.notify_one();
    } else {
      leading_ = false;
    }
  }

  // Runs the group `first...` in one transaction; true when it committed. Never throws: every
  // failure lands in the operations' errors.
  template <class Acquire>
  bool commit_group(pending* first, Acquire& acquire) noexcept {
    try {
      auto connection = acquire();
      sqlite_connection& c = *connection.get();
      if (first->next == nullptr && first->one_statement) {
        // Alone, and one statement: an autocommit statement, as without group commit.
        try {
          first->invoke(first->context, c);
        } catch (...) {
          first->error = std::current_exception();
          first->failed_alone = true;
          return false;
        }
        return true;
      }
      sqlite_write_transaction writing(c);
      // A group of one needs no savepoint: its transaction is the operation's own, and rolls
      // back whole (when `writing` goes) if the operation throws.
      const bool alone = first->next == nullptr;
      for (pending* op = first; op != nullptr; op = op->next) {
        if (!alone) execute(c, "SAVEPOINT idem_group_operation", "open an operation's savepoint");
        try {
          op->invoke(op->context, c);
        } catch (...) {
          op->error = std::current_exception();
          op->failed_alone = true;
          if (alone) return false;
          roll_back_operation(c);
          continue;
        }
        if (!alone) execute(c, "RELEASE idem_group_operation", "release an operation's savepoint");
      }
      writing.commit();
      return true;
    } catch (const store_error& failure) {
      fail_group(first, failure.failure(), failure.what());
    } catch (const std::exception& failure) {
      fail_group(first, store_failure::unavailable, failure.what());
    } catch (...) {
      fail_group(first, store_failure::unavailable, "an unknown exception");
    }
    return false;
  }

  // The operation that threw is undone to its savepoint; the group goes on. If SQLite already
  // ended the transaction (it does for some errors: I/O, a full disk), or the rollback fails,
  // the group cannot go on: this throws and every operation fails.
  static void roll_back_operation(sqlite_connection& c) {
    if (sqlite3_get_autocommit(c.db()) != 0) {
      throw store_error(store_failure::unavailable,
                        "idem::sqlite_store: SQLite rolled back a group commit's transaction "
                        "after one of its operations failed ('" +
                            c.settings().path + "': " + sqlite3_errmsg(c.db()) + ")");
    }
    execute(c, "ROLLBACK TO idem_group_operation", "roll back an operation's savepoint");
    execute(c, "RELEASE idem_group_operation", "release an operation's savepoint");
  }

  // Every operation that did not fail on its own gets the group's failure, each its own copy.
  // Never throws: out of memory, each gets the std::bad_alloc.
  static void fail_group(pending* first, store_failure failure, std::string_view why) noexcept {
    for (pending* op = first; op != nullptr; op = op->next) {
      if (op->failed_alone) continue;
      try {
        op->error = std::make_exception_ptr(store_error(
            failure,
            "idem::sqlite_store: the group commit this operation joined failed, nothing of it "
            "was written: " +
                std::string(why)));
      } catch (...) {
        op->error = std::current_exception();
      }
    }
  }

  static void execute(sqlite_connection& c, std::string_view sql, std::string_view what) {
    sqlite3_stmt* statement = c.handler_statement(sql);
    const int rc = sqlite3_step(statement);
    sqlite3_reset(statement);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) c.fail(rc, what);
  }

  const sqlite_group_commit_options options_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  pending* head_ = nullptr;
  pending* tail_ = nullptr;
  std::size_t queued_ = 0;
  bool leading_ = false;
  sqlite_group_commit_stats stats_;
};

}  // namespace detail
}  // namespace idem

#endif  // IDEM_STORE_SQLITE_GROUP_COMMIT_HPP
