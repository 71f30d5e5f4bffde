// sqlite_store::claim_within: claim, the handler's writes and the completion in one write
// transaction, one commit (idem/store/one_commit.hpp has the contract; docs/one_commit.md when
// to use it).
//
// SQLite has one write lock per database: BEGIN IMMEDIATE takes it before the claim reads, so a
// duplicate's claim_within (or claim) waits for this transaction to end, at most the busy
// timeout, and then reads what it committed. A duplicate that finds the key completed (or
// otherwise not its to run) in a plain read first answers without taking the lock at all, as
// claim does: in WAL mode that read never waits.
#ifndef IDEM_STORE_SQLITE_DETAIL_ONE_COMMIT_HPP
#define IDEM_STORE_SQLITE_DETAIL_ONE_COMMIT_HPP

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <idem/store/contract.hpp>
#include <idem/store/one_commit.hpp>
#include <idem/store/sqlite/detail/store.hpp>

namespace idem {

namespace detail {

// The store's writer lock, then BEGIN IMMEDIATE: true once both are held (a
// sqlite_write_transaction made with sqlite_begun gives them back); false when another thread or
// connection kept them past the busy timeout (the busy handler gave up); throws store_error for
// any other failure.
inline bool sqlite_begin_or_busy(sqlite_connection& c) {
  if (!c.lock_writer()) return false;
  int rc = SQLITE_ERROR;
  try {
    sqlite3_stmt* begin = c.statement(sqlite_statement::begin_immediate);
    rc = sqlite3_step(begin);
    sqlite3_reset(begin);
  } catch (...) {
    c.unlock_writer();
    throw;
  }
  if (rc == SQLITE_DONE || rc == SQLITE_ROW) return true;
  c.unlock_writer();
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
  // A replay, a mismatch or a live claim of the two-commit path changes nothing: answered from
  // a plain read, without the write lock.
  if (std::optional<record> existing = read_before_writing(c, request, now, absent)) {
    return {one_commit_status::existing, 0, std::move(*existing)};
  }
  if (!detail::sqlite_begin_or_busy(c)) return {one_commit_status::busy, 0, {}};
  detail::sqlite_write_transaction writing(c, detail::sqlite_begun);
  // Under the write lock, claim's own writing part decides and writes the claim, which stays in
  // this transaction (an enclosed write commits nothing): a record that appeared or changed
  // since the read above is decided again here.
  detail::sqlite_enclosed_write enclosed;
  claim_result claimed = claim_writing(c, request, absent, now, enclosed);
  if (claimed.status == claim_status::existing) {
    return {one_commit_status::existing, 0, std::move(claimed.existing)};
  }
  if (claimed.status == claim_status::full) return {one_commit_status::full, 0, {}};
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

#endif  // IDEM_STORE_SQLITE_DETAIL_ONE_COMMIT_HPP
