// postgres_store's InspectableStore members (idem/store/inspect.hpp). list_records walks the
// primary key (scope, key) from the cursor on, with only the filter's conditions in its SQL
// (PQexecParams: the text varies with the filter); on a hash-partitioned table the server merges
// the partitions' key order. forget is one statement: the record locked (FOR UPDATE), then
// released when the request allows it, and what was found answered either way.
#ifndef IDEM_STORE_POSTGRES_DETAIL_INSPECT_HPP
#define IDEM_STORE_POSTGRES_DETAIL_INSPECT_HPP

#include <libpq-fe.h>

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
#include <idem/store/postgres/detail/store.hpp>

namespace idem {

inline record_page postgres_store::list_records(const record_filter& filter,
                                                std::string_view cursor, std::size_t limit,
                                                store_time now) const {
  namespace pg = detail::postgres;
  constexpr const char* who = "idem::postgres_store::list_records";
  if (limit == 0) throw std::invalid_argument(std::string(who) + ": a limit of 0");
  std::pair<std::string, std::string> after;
  if (!cursor.empty()) after = detail::record_at_cursor(cursor, who);
  const pool& shared = state_checked();
  pg::parameters values;
  pg::add_now(values, caller_time(), now);
  std::string sql = "SELECT scope, key, " + std::string(pg::record_columns) + " FROM " +
                    shared.names.table + " WHERE state <> 2 AND expires_at > " + pg::now_sql(1);
  auto next = [&values] { return "$" + std::to_string(values.count() + 1); };
  if (!cursor.empty()) {
    sql += " AND (scope, key) > (" + next() + "::bytea, ";
    values.bytes(after.first);
    sql += next() + "::bytea)";
    values.bytes(after.second);
  }
  if (filter.scope) {
    sql += " AND scope = " + next() + "::bytea";
    values.bytes(*filter.scope);
  }
  if (filter.state) {
    sql += " AND state = " + next() + "::int8";
    values.int8(*filter.state == record_state::completed ? 1 : 0);
  }
  if (filter.created_before) {
    sql += " AND created_at < " + next() + "::int8";
    values.int8(pg::to_nanoseconds(*filter.created_before));
  }
  if (filter.lease_ended_by) {
    sql += " AND state = 0 AND lease_until <= " + next() + "::int8";
    values.int8(pg::to_nanoseconds(*filter.lease_ended_by));
  }
  // One more than the page: whether there is a next one.
  sql += " ORDER BY scope, key LIMIT " + next() + "::int8";
  values.int8(static_cast<std::int64_t>(
      std::min<std::size_t>(limit, std::numeric_limits<std::int64_t>::max() - 1) + 1));
  auto connection = state_checked().acquire();
  const pg::result_ptr result = connection.run_params(sql, values, "list records");
  const int rows = PQntuples(result.get());
  record_page page;
  for (int row = 0; row < rows; ++row) {
    if (page.records.size() == limit) {
      page.next = detail::record_cursor(page.records.back().scope, page.records.back().key);
      break;
    }
    record& r = page.records.emplace_back();
    r.scope = std::string(pg::get_bytes(result.get(), row, 0));
    r.key = std::string(pg::get_bytes(result.get(), row, 1));
    pg::read_record(result.get(), row, 2, r);
  }
  return page;
}

inline forget_result postgres_store::forget(const forget_request& request) {
  namespace pg = detail::postgres;
  const pool& shared = state_checked();
  const std::string& table = shared.names.table;
  // $1 scope, $2 key, $3 now (or NULL: the server's clock), $4 the fence asked for (or NULL),
  // $5 force (1 or 0).
  const std::string sql =
      "WITH clock AS (SELECT " + pg::now_sql(3) +
      " AS n), found AS (SELECT fence, state, lease_until, expires_at FROM " + table +
      " WHERE scope = $1::bytea AND key = $2::bytea AND state <> 2 FOR UPDATE), released AS ("
      "UPDATE " +
      table +
      " AS t SET state = 2, response = NULL, recovery = NULL FROM found, clock WHERE t.scope = "
      "$1::bytea AND t.key = $2::bytea AND t.fence = found.fence AND found.expires_at > clock.n "
      "AND ($4::int8 IS NULL OR found.fence = $4::int8) AND (found.state <> 0 OR "
      "found.lease_until <= clock.n OR $5::int8 = 1) RETURNING t.fence) SELECT found.fence, "
      "found.expires_at > clock.n, EXISTS (SELECT 1 FROM released) FROM found, clock";
  pg::parameters values;
  values.bytes(request.scope).bytes(request.key);
  pg::add_now(values, caller_time(), request.now);
  if (request.fence) {
    values.int8(static_cast<std::int64_t>(*request.fence));
  } else {
    values.null();
  }
  values.int8(request.force ? 1 : 0);
  auto connection = state_checked().acquire();
  const pg::result_ptr result = connection.run_params(sql, values, "forget a record");
  if (PQntuples(result.get()) == 0) return {forget_status::absent, 0};
  const auto fence = static_cast<std::uint64_t>(pg::get_int(result.get(), 0, 0));
  // Booleans in binary format: one byte.
  const bool live = PQgetvalue(result.get(), 0, 1)[0] != 0;
  const bool released = PQgetvalue(result.get(), 0, 2)[0] != 0;
  if (!live) return {forget_status::absent, 0};
  if (released) return {forget_status::forgotten, fence};
  if (request.fence && *request.fence != fence) return {forget_status::fence_changed, fence};
  return {forget_status::live_claim, fence};
}

}  // namespace idem

#endif  // IDEM_STORE_POSTGRES_DETAIL_INSPECT_HPP
