// sqlite_store's InspectableStore members (idem/store/inspect.hpp): list_records walks the
// primary key (scope, key) from the cursor on, with only the filter's conditions in its SQL (one
// statement per combination, prepared once per connection), so a page costs what it reads;
// forget reads and releases the record in one write transaction.
#ifndef IDEM_STORE_SQLITE_DETAIL_INSPECT_HPP
#define IDEM_STORE_SQLITE_DETAIL_INSPECT_HPP

#include <sqlite3.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <idem/store/contract.hpp>
#include <idem/store/detail/cursor.hpp>
#include <idem/store/inspect.hpp>
#include <idem/store/sqlite/detail/store.hpp>

namespace idem {

namespace detail {

// The list statement for the conditions a filter has (and a cursor's), named parameters bound
// only where they appear.
inline std::string sqlite_list_sql(const record_filter& filter, bool after) {
  std::string sql =
      "SELECT scope, key, state, fence, created_at, lease_until, expires_at, fingerprint, "
      "response, recovery FROM idem_records WHERE state <> 2 AND expires_at > :now";
  if (after) sql += " AND (scope, key) > (:after_scope, :after_key)";
  if (filter.scope) sql += " AND scope = :scope";
  if (filter.state) sql += " AND state = :state";
  if (filter.created_before) sql += " AND created_at < :created_before";
  if (filter.lease_ended_by) sql += " AND state = 0 AND lease_until <= :lease_ended_by";
  sql += " ORDER BY scope, key LIMIT :limit";
  return sql;
}

inline int sqlite_parameter(sqlite3_stmt* statement, const char* name) {
  return sqlite3_bind_parameter_index(statement, name);
}

}  // namespace detail

inline record_page sqlite_store::list_records(const record_filter& filter, std::string_view cursor,
                                              std::size_t limit, store_time now) {
  constexpr const char* who = "idem::sqlite_store::list_records";
  if (limit == 0) throw std::invalid_argument(std::string(who) + ": a limit of 0");
  std::pair<std::string, std::string> after;
  if (!cursor.empty()) after = detail::record_at_cursor(cursor, who);
  lease connection = acquire();
  detail::sqlite_connection& c = *connection.get();
  detail::sqlite_use list(c.handler_statement(detail::sqlite_list_sql(filter, !cursor.empty())));
  sqlite3_stmt* s = list.get();
  using detail::sqlite_parameter;
  detail::sqlite_bind_integer(c, s, sqlite_parameter(s, ":now"), detail::sqlite_nanoseconds(now));
  if (!cursor.empty()) {
    detail::sqlite_bind_bytes(c, s, sqlite_parameter(s, ":after_scope"), after.first);
    detail::sqlite_bind_bytes(c, s, sqlite_parameter(s, ":after_key"), after.second);
  }
  if (filter.scope) detail::sqlite_bind_bytes(c, s, sqlite_parameter(s, ":scope"), *filter.scope);
  if (filter.state) {
    detail::sqlite_bind_integer(c, s, sqlite_parameter(s, ":state"),
                                *filter.state == record_state::completed
                                    ? detail::sqlite_completed
                                    : detail::sqlite_in_progress);
  }
  if (filter.created_before) {
    detail::sqlite_bind_integer(c, s, sqlite_parameter(s, ":created_before"),
                                detail::sqlite_nanoseconds(*filter.created_before));
  }
  if (filter.lease_ended_by) {
    detail::sqlite_bind_integer(c, s, sqlite_parameter(s, ":lease_ended_by"),
                                detail::sqlite_nanoseconds(*filter.lease_ended_by));
  }
  // One more than the page: whether there is a next one.
  const auto wanted = static_cast<std::int64_t>(
      std::min<std::size_t>(limit, std::numeric_limits<std::int64_t>::max() - 1) + 1);
  detail::sqlite_bind_integer(c, s, sqlite_parameter(s, ":limit"), wanted);
  record_page page;
  while (c.step(s, "list records") == SQLITE_ROW) {
    if (page.records.size() == limit) {
      page.next = detail::record_cursor(page.records.back().scope, page.records.back().key);
      break;
    }
    record found = detail::sqlite_snapshot(s, 2, detail::sqlite_read_row(s, 2));
    found.scope = detail::sqlite_column_bytes(s, 0);
    found.key = detail::sqlite_column_bytes(s, 1);
    page.records.push_back(std::move(found));
  }
  return page;
}

inline forget_result sqlite_store::forget(const forget_request& request) {
  lease connection = acquire();
  detail::sqlite_connection& c = *connection.get();
  // Read and released under the write lock: nothing changes the record between the two.
  detail::sqlite_write_transaction writing(c);
  std::uint64_t fence = 0;
  {
    detail::sqlite_use read(c.statement(detail::sqlite_statement::read_record));
    detail::sqlite_bind_key(c, read.get(), request.scope, request.key);
    if (c.step(read.get(), "read a record") != SQLITE_ROW) return {forget_status::absent, 0};
    const detail::sqlite_row found = detail::sqlite_read_row(read.get(), 0);
    if (found.state == detail::sqlite_released ||
        found.expires_at <= detail::sqlite_nanoseconds(request.now)) {
      return {forget_status::absent, 0};
    }
    fence = found.fence;
    if (request.fence && *request.fence != fence) return {forget_status::fence_changed, fence};
    if (found.state == detail::sqlite_in_progress &&
        detail::sqlite_nanoseconds(request.now) < found.lease_until && !request.force) {
      return {forget_status::live_claim, fence};
    }
  }
  if (!detail::sqlite_fenced_write(c, detail::sqlite_statement::release,
                                   fenced_key{request.scope, request.key, fence}, {})) {
    throw std::logic_error("idem::sqlite_store::forget: the record changed under the write lock");
  }
  writing.commit();
  return {forget_status::forgotten, fence};
}

}  // namespace idem

#endif  // IDEM_STORE_SQLITE_DETAIL_INSPECT_HPP
