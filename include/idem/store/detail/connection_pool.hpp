// connection_pool: the one pool of connections the durable stores share (sqlite_store,
// postgres_store, redis_store). A store is a handle whose copies share one pool, used from many
// threads; each call borrows a connection for its duration and gives it back.
//
// What the pool promises:
//   * Bounded. At most `size` connections exist at once: idle, lent, being opened, or being
//     closed. A connection that goes is closed before its place is freed, so a server that
//     counts connections never sees one more than the pool's size.
//   * Lazy. Connections are opened as calls need them, outside the pool's lock (opening one is
//     a round trip); one that fails to open frees its place and the caller gets the exception.
//   * Reuse. The most recently returned idle connection is lent first (its caches and pages are
//     the warmest). The adapter's `reusable` check runs on the way back (a connection left
//     inside a transaction is closed, not lent again); its `alive` check runs on the way out of
//     the idle list (a server that restarted closed every idle connection).
//   * Broken ones go. A lease whose connection failed is discarded: it is closed and never lent
//     again. When the server behind every connection went away, discard_all also closes the
//     idle ones and, as they come back, every one lent before.
//   * Waiting. A call that finds every connection out waits for one to come back: as long as it
//     takes (acquire), or up to a bound (acquire_for).
#ifndef IDEM_STORE_DETAIL_CONNECTION_POOL_HPP
#define IDEM_STORE_DETAIL_CONNECTION_POOL_HPP

#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace idem::detail {

// What a pool needs of its connection handle: movable, and null when it holds nothing.
template <class Connection>
concept nullable_connection = std::movable<Connection> && requires(Connection connection) {
  { connection == nullptr } -> std::convertible_to<bool>;
  connection.reset();
};

/// A pool of `Connection`s: a movable, nullable handle that closes its connection when destroyed
/// (a std::unique_ptr with the client library's close function). Null is "no connection": a
/// lease holds its connection as such a handle, not in a std::optional, because GCC 12 at -O2
/// warns falsely (-Wmaybe-uninitialized) about a moved-from std::optional<std::unique_ptr>.
template <class Connection>
class connection_pool {
  static_assert(nullable_connection<Connection>,
                "A pool's Connection must be a movable handle that is null when it holds no "
                "connection, such as a std::unique_ptr with the client library's close function.");

 public:
  /// How the adapter opens and checks its connections. Called without the pool's lock held.
  struct hooks {
    /// Opens a connection, or throws.
    std::function<Connection()> open;
    /// On the way back: may this connection serve another call? Empty: always. Must not throw.
    std::function<bool(Connection&)> reusable;
    /// On the way out of the idle list: is it still connected? Empty: always. Must not throw.
    std::function<bool(Connection&)> alive;
  };

  class lease;

  connection_pool(std::size_t size, hooks given) : size_(size), hooks_(std::move(given)) {
    if (size_ == 0) throw std::invalid_argument("idem: a connection pool needs room for one");
    if (!hooks_.open) throw std::invalid_argument("idem: a connection pool needs an open hook");
  }
  connection_pool(const connection_pool&) = delete;
  connection_pool& operator=(const connection_pool&) = delete;
  ~connection_pool() = default;

  /// The most connections that may exist at once.
  std::size_t size() const noexcept { return size_; }

  /// A connection: an idle one, a new one when there is room, or else the first to come back.
  lease acquire() { return take(std::nullopt); }

  /// As acquire, but waits for a connection to come back at most `patience`; the lease holds
  /// nothing (held() is false) when none came back in time.
  lease acquire_for(std::chrono::nanoseconds patience) {
    return take(std::chrono::steady_clock::now() + patience);
  }

 private:
  enum class disposal : std::uint8_t { keep, discard, discard_all };

  lease take(std::optional<std::chrono::steady_clock::time_point> deadline) {
    std::unique_lock lock(mutex_);
    const auto ready = [this] { return !idle_.empty() || open_ < size_; };
    for (;;) {
      if (!deadline) {
        returned_.wait(lock, ready);
      } else if (!returned_.wait_until(lock, *deadline, ready)) {
        return lease(*this);
      }
      if (idle_.empty()) break;
      Connection connection{std::move(idle_.back())};
      idle_.pop_back();
      const std::uint64_t generation = generation_;
      if (!hooks_.alive) return lease(*this, std::move(connection), generation, true);
      lock.unlock();
      if (hooks_.alive(connection)) return lease(*this, std::move(connection), generation, true);
      connection.reset();  // closed before its place is freed
      lock.lock();
      --open_;  // this thread takes the place itself: no one to wake
    }
    ++open_;
    const std::uint64_t generation = generation_;
    lock.unlock();
    try {
      return lease(*this, hooks_.open(), generation, false);
    } catch (...) {
      lock.lock();
      --open_;
      lock.unlock();
      returned_.notify_one();
      throw;
    }
  }

  void put_back(Connection& connection, std::uint64_t generation, disposal how) noexcept {
    const bool keep = how == disposal::keep && (!hooks_.reusable || hooks_.reusable(connection));
    std::vector<Connection> closing;
    {
      const std::lock_guard lock(mutex_);
      // Only the first failure of a generation closes the idle ones: after it, they are newer
      // than the server that went away.
      if (how == disposal::discard_all && generation == generation_) {
        ++generation_;
        closing.swap(idle_);
      }
      if (keep && generation == generation_) {
        idle_.push_back(std::move(connection));
        connection = nullptr;
      }
    }
    if (connection == nullptr) {
      returned_.notify_one();
      return;
    }
    // Closed outside the lock (a close may be a round trip), and before their places are freed.
    const std::size_t freed = closing.size() + 1;
    connection.reset();
    closing.clear();
    {
      const std::lock_guard lock(mutex_);
      open_ -= freed;
    }
    if (freed == 1) {
      returned_.notify_one();
    } else {
      returned_.notify_all();
    }
  }

  const std::size_t size_;
  const hooks hooks_;
  std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<Connection> idle_;  // a stack: the most recently returned on top
  std::size_t open_ = 0;          // connections that exist, whatever they are doing
  std::uint64_t generation_ = 0;  // bumped by discard_all: connections of older ones go
};

/// One connection, borrowed for one call. Given back when it goes, unless given back or
/// discarded before.
template <class Connection>
class connection_pool<Connection>::lease {
 public:
  lease(lease&& other) noexcept
      : owner_(other.owner_),
        connection_(std::exchange(other.connection_, nullptr)),
        generation_(other.generation_),
        reused_(other.reused_) {}
  lease& operator=(lease&&) = delete;
  lease(const lease&) = delete;
  lease& operator=(const lease&) = delete;
  ~lease() { give_back(); }

  /// Whether it still holds its connection (not given back or discarded yet).
  bool held() const noexcept { return connection_ != nullptr; }
  Connection& get() noexcept { return connection_; }
  const Connection& get() const noexcept { return connection_; }
  /// Whether the connection served an earlier call: a failure on it may be the server having
  /// closed it meanwhile, which a fresh connection would not meet.
  bool reused() const noexcept { return reused_; }

  /// Back to the pool, to serve again if the adapter finds it reusable.
  void give_back() noexcept { finish(disposal::keep); }
  /// The connection failed: closed, never lent again.
  void discard() noexcept { finish(disposal::discard); }
  /// The server behind it went away: this connection is closed, and so is every other one
  /// opened before now, idle ones at once and lent ones when they come back.
  void discard_all() noexcept { finish(disposal::discard_all); }

 private:
  friend class connection_pool;
  explicit lease(connection_pool& owner) noexcept
      : owner_(&owner), connection_(nullptr), generation_(0), reused_(false) {}
  lease(connection_pool& owner, Connection connection, std::uint64_t generation,
        bool reused) noexcept
      : owner_(&owner),
        connection_(std::move(connection)),
        generation_(generation),
        reused_(reused) {}

  void finish(disposal how) noexcept {
    if (connection_ != nullptr) owner_->put_back(connection_, generation_, how);
    connection_.reset();
  }

  connection_pool* owner_;
  Connection connection_;  // null once given back or discarded
  std::uint64_t generation_;
  bool reused_;
};

}  // namespace idem::detail

#endif  // IDEM_STORE_DETAIL_CONNECTION_POOL_HPP
