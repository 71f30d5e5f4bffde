// sqlite_store::claim_within: claim, the handler's writes and the completion in one write
// transaction, one commit (idem/store/one_commit.hpp has the contract; docs/one_commit.md when
// to use it).
//
// SQLite has one write lock per database: BEGIN IMMEDIATE takes it before the claim reads, so a
// duplicate's claim_within (or claim) waits for this transaction to end, at most the busy
// timeout, and then reads what it committed. A duplicate that finds the key completed (or
// otherwise not its to run) in a plain read first answers without taking the lock at all, as
// claim does: in WAL mode that read never waits.
#ifndef IDEM_STORE_SQLITE_ONE_COMMIT_HPP
#define IDEM_STORE_SQLITE_ONE_COMMIT_HPP

#include <sqlite3.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <idem/store/contract.hpp>
#include <idem/store/one_commit.hpp>
#include <idem/store/sqlite.hpp>

namespace idem {

namespace detail {

// A write transaction begun by sqlite_begin_or_busy: rolled back when the scope ends, unless
// committed.
class sqlite_one_commit_transaction {
 public:
  explicit sqlite_one_commit_transaction(sqlite_connection& connection) noexcept
      : connection_(connection) {}
  sqlite_one_commit_transaction(const sqlite_one_commit_transaction&) = delete;
  sqlite_one_commit_transaction& operator=(const sqlite_one_commit_transaction&) = delete;
  ~sqlite_one_commit_transaction() {
    if (committed_ || sqlite3_get_autocommit(connection_.db()) != 0) return;
    try {
      connection_.run(sqlite_statement::rollback, "roll back");
    } catch (const store_error&) {
      // The pool drops a connection left inside a transaction.
    }
  }
  void commit() {
    connection_.run(sqlite_statement::commit, "commit");
    committed_ = true;
  }

 private:
  sqlite_connection& connection_;
  bool committed_ = false;
};

// BEGIN IMMEDIATE: true once the write lock is held; false when another connection kept it past
// the busy timeout (the busy handler gave up); throws store_error for any other failure.
inline bool sqlite_begin_or_busy(sqlite_connection& c) {
  sqlite3_stmt* begin = c.statement(sqlite_statement::begin_immediate);
  const int rc = sqlite3_step(begin);
  sqlite3_reset(begin);
  if (rc == SQLITE_DONE || rc == SQLITE_ROW) return true;
  if ((rc & 0xff) == SQLITE_BUSY) return false;
  c.fail(rc, "begin a write transaction");
}

}  // namespace detail

template <class Produce>
one_commit_result sqlite_store::claim_within(const claim_request& request, Produce&& produce) {
  static_assert(std::is_invocable_r_v<std::string, Produce&, transaction&, claim_result&>,
                "claim_within's argument must be callable as std::string(idem::sqlite_store::"
                "transaction&, idem::claim_result&): it returns the encoded response.");
  lease connection = acquire();
  detail::sqlite_connection& c = *connection.get();
  const std::int64_t now = detail::sqlite_nanoseconds(request.now);
  bool absent = true;
  {
    // A replay, a mismatch or a live claim of the two-commit path changes nothing: answered
    // from a plain read, without the write lock.
    detail::sqlite_use read(c.statement(detail::sqlite_statement::read_record));
    detail::sqlite_bind_key(c, read.get(), request.scope, request.key);
    if (c.step(read.get(), "read a record") == SQLITE_ROW) {
      absent = false;
      const detail::sqlite_row found = detail::sqlite_read_row(read.get(), 0);
      if (detail::sqlite_decide(found, request, now) == detail::sqlite_decision::existing) {
        return {one_commit_status::existing, 0, detail::sqlite_snapshot(read.get(), 0, found)};
      }
    }
  }
  if (!detail::sqlite_begin_or_busy(c)) return {one_commit_status::busy, 0, {}};
  detail::sqlite_one_commit_transaction writing(c);
  // Under the write lock: the record as it is now, and what a claim does with it.
  claim_result claimed;
  std::optional<detail::sqlite_row> found;
  std::int64_t found_bytes = 0;
  const bool capped =
      state_->settings.max_records_per_scope != std::numeric_limits<std::size_t>::max();
  bool made = false;  // by the fast path's insert
  if (absent && !state_->bounded && !capped) {
    // As claim does: the key was absent a moment ago and most likely still is; the unique key
    // decides under the write lock, and only a record that appeared in between is read below.
    detail::sqlite_use insert(c.statement(detail::sqlite_statement::create_if_absent));
    detail::sqlite_bind_new_record(c, insert.get(), request, 1);
    c.step(insert.get(), "claim a record");
    made = sqlite3_changes64(c.db()) == 1;
    if (made) {
      claimed.status = claim_status::claimed;
      claimed.fence = 1;
    }
  }
  if (!made) {
    detail::sqlite_use read(c.statement(detail::sqlite_statement::read_record));
    detail::sqlite_bind_key(c, read.get(), request.scope, request.key);
    if (c.step(read.get(), "read a record") == SQLITE_ROW) {
      found = detail::sqlite_read_row(read.get(), 0);
      found_bytes = static_cast<std::int64_t>(request.scope.size() + request.key.size()) +
                    sqlite3_column_bytes(read.get(), 6) + sqlite3_column_bytes(read.get(), 7);
    }
    const detail::sqlite_decision decided =
        found ? detail::sqlite_decide(*found, request, now) : detail::sqlite_decision::create;
    if (decided == detail::sqlite_decision::existing) {
      return {one_commit_status::existing, 0, detail::sqlite_snapshot(read.get(), 0, *found)};
    }
    if (decided == detail::sqlite_decision::take_over) {
      claimed.status = claim_status::taken_over;
      claimed.existing = detail::sqlite_snapshot(read.get(), 0, *found);
      claimed.fence = found->fence + 1;
      claimed.existing.fence = claimed.fence;
      claimed.existing.lease_until = request.now + request.lease;
    } else {
      claimed.status = claim_status::claimed;
      claimed.fence = found ? found->fence + 1 : 1;
    }
  }
  if (made) {
    // The record is there: nothing more to write for the claim.
  } else if (claimed.status == claim_status::taken_over) {
    detail::sqlite_use update(c.statement(detail::sqlite_statement::take_over));
    detail::sqlite_bind_key(c, update.get(), request.scope, request.key);
    detail::sqlite_bind_integer(c, update.get(), 3, static_cast<std::int64_t>(claimed.fence));
    detail::sqlite_bind_integer(c, update.get(), 4,
                                detail::sqlite_nanoseconds(claimed.existing.lease_until));
    c.step(update.get(), "take over a claim");
  } else {
    if (capped) {
      detail::sqlite_use count(c.statement(detail::sqlite_statement::count_live_in_scope));
      detail::sqlite_bind_bytes(c, count.get(), 1, request.scope);
      detail::sqlite_bind_integer(c, count.get(), 2, now);
      c.step(count.get(), "count the scope's records");
      std::int64_t live = sqlite3_column_int64(count.get(), 0);
      if (found && now < found->expires_at) --live;  // the record this claim replaces
      if (live >= 0 && static_cast<std::uint64_t>(live) >= state_->settings.max_records_per_scope) {
        return {one_commit_status::full, 0, {}};
      }
    }
    if (state_->bounded &&
        !detail::sqlite_has_room(c, state_->limits, request, found.has_value(), found_bytes)) {
      // Expired records are not live: make room from them before saying full.
      detail::sqlite_use removal(c.statement(detail::sqlite_statement::delete_expired));
      detail::sqlite_bind_integer(c, removal.get(), 1, now);
      c.step(removal.get(), "remove expired records");
      const bool replaced_was_swept = found && found->expires_at <= now;
      if (!detail::sqlite_has_room(c, state_->limits, request, found && !replaced_was_swept,
                                   replaced_was_swept ? 0 : found_bytes)) {
        return {one_commit_status::full, 0, {}};
      }
    }
    detail::sqlite_use insert(c.statement(detail::sqlite_statement::create_record));
    detail::sqlite_bind_new_record(c, insert.get(), request, claimed.fence);
    c.step(insert.get(), "claim a record");
  }
  const fenced_key held{request.scope, request.key, claimed.fence};
  transaction open(c, *state_, held, request.now);
  const std::string response = produce(open, claimed);
  if (sqlite3_get_autocommit(c.db()) != 0) {
    throw std::logic_error(
        "idem::sqlite_store::claim_within: the handler ended the transaction itself (COMMIT or "
        "ROLLBACK, or a failed statement it went on after); use SAVEPOINTs");
  }
  if (state_->bounded) {
    const std::optional<detail::sqlite_held_size> sizes = detail::sqlite_held_sizes(c, held);
    if (!sizes) throw std::logic_error("idem::sqlite_store::claim_within: the record vanished");
    detail::sqlite_reserve_bytes(c, state_->limits, response.size(),
                                 sizes->response + sizes->recovery);
  }
  if (!detail::sqlite_fenced_write(c, detail::sqlite_statement::complete, held, response)) {
    // Nobody else can write while this transaction holds the lock: the handler changed it.
    throw std::logic_error(
        "idem::sqlite_store::claim_within: the record was changed inside the transaction (by the "
        "handler's own SQL)");
  }
  writing.commit();
  return {one_commit_status::committed, claimed.fence, {}};
}

}  // namespace idem

#endif  // IDEM_STORE_SQLITE_ONE_COMMIT_HPP
