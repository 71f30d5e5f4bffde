// async_postgres_store's shared state: up to pool_size connections (link.hpp), the operations
// waiting for one, the thread that opens connections and sends cancel requests, and each
// operation's deadline. Every member runs on one strand of the store's executor, except the
// opening and cancelling, which block and so run on the store's own thread.
//
// * Spread: a job goes to the connection with the fewest jobs in flight, up to pipeline_depth
//   each; when none has room it waits, in order, and a connection is opened if the pool has
//   room for one.
// * Opening: on the store's thread, blocking (session.hpp: connect, configure, migrate once,
//   prepare), then handed to the strand. A failed attempt fails the jobs that have no
//   connection to go to, and the next attempt waits a backoff that doubles up to a bound.
// * Cancelling: PQcancel blocks for a connection to the server and back, and libpq 15 has no
//   non-blocking form (PQcancelStart came with libpq 17), so it too runs on the store's thread.
#ifndef IDEM_STORE_POSTGRES_DETAIL_ASYNC_POOL_HPP
#define IDEM_STORE_POSTGRES_DETAIL_ASYNC_POOL_HPP

#include <libpq-fe.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <idem/async/asio.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres/detail/async/job.hpp>
#include <idem/store/postgres/detail/async/link.hpp>
#include <idem/store/postgres/detail/session.hpp>

#if defined(IDEM_ASIO_STANDALONE)
#include <asio/thread_pool.hpp>
#else
#include <boost/asio/thread_pool.hpp>
#endif

namespace idem::detail::postgres::async {

struct pool_settings {
  std::size_t size = 8;
  std::size_t pipeline_depth = 4;
  std::chrono::milliseconds operation_timeout{0};
  std::chrono::milliseconds reconnect_delay{50};
  std::chrono::milliseconds max_reconnect_delay{5000};
};

class pool : public std::enable_shared_from_this<pool> {
 public:
  using strand_type = asio::strand<asio::any_io_executor>;

  pool(asio::any_io_executor executor, std::shared_ptr<session_opener> opener,
       pool_settings settings)
      : executor_(std::move(executor)),
        strand_(asio::make_strand(executor_)),
        opener_(std::move(opener)),
        settings_(settings),
        delay_(settings.reconnect_delay),
        backoff_(strand_) {}
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;
  ~pool() {
    // No job is left (each holds the pool); what remains are idle connections and the thread.
    for (const std::shared_ptr<link>& each : links_)
      each->shut_down();
    helper_.stop();
    helper_.join();
  }

  const asio::any_io_executor& executor() const noexcept { return executor_; }
  const strand_type& strand() const noexcept { return strand_; }
  const pool_settings& settings() const noexcept { return settings_; }

  // A connection opened on the calling thread (connect_at_start), taken into the pool.
  void adopt(connection_ptr connection) {
    asio::dispatch(
        strand_, [self = shared_from_this(),
                  connection = std::make_shared<connection_ptr>(std::move(connection))]() mutable {
          self->connected(std::move(*connection), nullptr);
        });
  }

  // From any thread: queues `work` behind the jobs already waiting.
  void submit(std::shared_ptr<job> work) {
    asio::dispatch(strand_, [self = shared_from_this(), work = std::move(work)]() mutable {
      self->enqueue(std::move(work));
    });
  }

  // On the strand: queues `work` again (a claim asked once more); its deadline keeps running.
  void enqueue(std::shared_ptr<job> work) {
    if (work->finished()) return;
    if (settings_.operation_timeout.count() > 0 && work->timed() && !work->deadline()) {
      auto& timer = work->deadline().emplace(strand_);
      timer.expires_after(settings_.operation_timeout);
      timer.async_wait([self = shared_from_this(),
                        target = std::weak_ptr<job>(work)](const asio_error_code& error) {
        if (error) return;
        if (const std::shared_ptr<job> late = target.lock()) {
          self->abandon(late, "timed out after " +
                                  std::to_string(self->settings_.operation_timeout.count()) +
                                  " ms");
        }
      });
    }
    waiting_.push_back(std::move(work));
    pump();
  }

  // From any thread: the caller gave up on `target` (its cancellation slot); `waiting_only`:
  // only if nothing was sent yet.
  void cancel(std::weak_ptr<job> target, bool waiting_only) {
    asio::post(strand_, [self = shared_from_this(), target = std::move(target), waiting_only] {
      const std::shared_ptr<job> late = target.lock();
      if (!late || (waiting_only && late->sent())) return;
      self->abandon(late, "cancelled");
    });
  }

 private:
  // Completes `late` at once with store_error(unavailable). One still waiting is dropped, and
  // nothing was sent. One in flight keeps its place in its connection's line, reading its
  // replies to the end so the jobs behind it get theirs; when the server is working on it, a
  // cancel request stops it there (a lock wait, a long statement).
  void abandon(const std::shared_ptr<job>& late, const std::string& why) {
    if (late->finished()) return;
    link* wire = late->on();
    if (wire == nullptr) {
      const auto at = std::find(waiting_.begin(), waiting_.end(), late);
      if (at != waiting_.end()) waiting_.erase(at);
      late->fail(std::make_exception_ptr(store_error(
          store_failure::unavailable,
          std::string(store_name) + ": " + why + " before it was sent; nothing was written")));
      return;
    }
    late->fail(std::make_exception_ptr(
        store_error(store_failure::unavailable,
                    std::string(store_name) + ": " + why +
                        " while the server had it: it may or may not have taken effect")));
    if (wire->working_on(*late)) cancel_on_server(*wire);
  }

  void cancel_on_server(link& wire) {
    struct freer {
      void operator()(PGcancel* cancel) const noexcept { PQfreeCancel(cancel); }
    };
    std::shared_ptr<PGcancel> request(PQgetCancel(wire.get()), freer{});
    if (!request) return;
    wire.cancel_sent();
    asio::post(helper_, [request, target = std::weak_ptr<link>(wire.shared_from_this()),
                         home = asio::prefer(strand_, asio::execution::outstanding_work.tracked)] {
      std::array<char, 256> error{};
      // Best effort: a cancel that cannot reach the server leaves the statement to
      // statement_timeout; the caller has had its answer either way.
      (void)PQcancel(request.get(), error.data(), static_cast<int>(error.size()));
      asio::post(home, [target] {
        if (const std::shared_ptr<link> wire = target.lock()) wire->cancel_arrived();
      });
    });
  }

  // Sends what waits to connections with room, in order; opens one more when none has room.
  void pump() {
    while (!waiting_.empty()) {
      if (waiting_.front()->finished()) {
        waiting_.pop_front();
        continue;
      }
      link* best = pick(waiting_.front()->exclusive());
      if (best == nullptr) break;
      std::shared_ptr<job> next = std::move(waiting_.front());
      waiting_.pop_front();
      best->start(std::move(next));
    }
    if (!waiting_.empty()) open_more();
  }

  // The connection with the fewest jobs in flight that takes this one. An idle one is checked
  // first (one recv): the server may have closed it meanwhile.
  link* pick(bool exclusive) {
    for (;;) {
      link* best = nullptr;
      for (const std::shared_ptr<link>& each : links_) {
        if (!each->accepts(exclusive, settings_.pipeline_depth)) continue;
        if (best == nullptr || each->in_flight() < best->in_flight()) best = each.get();
      }
      if (best == nullptr || best->check_alive()) return best;
      // Broken while idle: it leaves the pool now (its notice finds it gone already).
      links_.erase(std::remove_if(links_.begin(), links_.end(),
                                  [](const std::shared_ptr<link>& each) { return each->broken(); }),
                   links_.end());
    }
  }

  void open_more() {
    if (backing_off_) return;
    if (links_.size() + opening_ >= settings_.size) return;
    if (opening_ >= waiting_.size()) return;
    ++opening_;
    asio::post(helper_, [opener = opener_, target = weak_from_this(),
                         home = asio::prefer(strand_, asio::execution::outstanding_work.tracked)] {
      auto connection = std::make_shared<connection_ptr>();
      std::exception_ptr error;
      try {
        *connection = opener->open();
      } catch (...) {
        error = std::current_exception();
      }
      asio::post(home, [target, connection, error] {
        if (const std::shared_ptr<pool> self = target.lock()) {
          --self->opening_;
          self->connected(std::move(*connection), error);
        }
      });
    });
  }

  void connected(connection_ptr connection, std::exception_ptr error) {
    if (!error) {
      try {
        auto made = std::make_shared<link>(strand_, std::move(connection),
                                           [target = weak_from_this()](bool lost) {
                                             if (const std::shared_ptr<pool> self = target.lock())
                                               self->changed(lost);
                                           });
        links_.push_back(std::move(made));
        delay_ = settings_.reconnect_delay;
        pump();
        return;
      } catch (...) {
        error = std::current_exception();
      }
    }
    // Opening failed: what waits with no connection to go to fails with the reason, and the
    // next attempt waits out a backoff.
    if (links_.empty() && opening_ == 0) {
      std::deque<std::shared_ptr<job>> failed;
      failed.swap(waiting_);
      for (const std::shared_ptr<job>& each : failed)
        each->fail(error);
    }
    backing_off_ = true;
    backoff_.expires_after(delay_);
    delay_ = std::min(delay_ * 2, settings_.max_reconnect_delay);
    backoff_.async_wait([target = weak_from_this()](const asio_error_code& failure) {
      if (failure) return;
      if (const std::shared_ptr<pool> self = target.lock()) {
        self->backing_off_ = false;
        self->pump();
      }
    });
  }

  // A connection has room again, or broke: broken ones leave the pool, and what waits goes on.
  void changed(bool lost) {
    if (lost) {
      links_.erase(std::remove_if(links_.begin(), links_.end(),
                                  [](const std::shared_ptr<link>& each) { return each->broken(); }),
                   links_.end());
    }
    pump();
  }

  asio::any_io_executor executor_;
  strand_type strand_;
  std::shared_ptr<session_opener> opener_;
  pool_settings settings_;
  std::vector<std::shared_ptr<link>> links_;
  std::deque<std::shared_ptr<job>> waiting_;
  std::size_t opening_ = 0;
  bool backing_off_ = false;
  std::chrono::milliseconds delay_;
  asio::steady_timer backoff_;
  // Opens connections and sends cancel requests, which block. Two threads, so that a cancel
  // does not wait behind a connection being opened.
  asio::thread_pool helper_{2};
};

}  // namespace idem::detail::postgres::async

#endif  // IDEM_STORE_POSTGRES_DETAIL_ASYNC_POOL_HPP
