// postgres_store's batches (idem/store/batch.hpp): many claims, completions, or a transactional
// completion of many records, each in one statement (one round trip) over arrays.
//
//   claim_batch            one INSERT ... SELECT FROM unnest($...) ON CONFLICT (scope, key) DO
//                          UPDATE ... WHERE <the single claim's condition> RETURNING: the same
//                          decision as claim, per row (new, expired and released records claimed,
//                          abandoned claims taken over); the same statement reads the rows it did
//                          not take. A row whose snapshot cannot explain why it was not taken (a
//                          record committed or removed meanwhile) is claimed again alone, as claim
//                          asks itself again. Rows are inserted in the order given (the inbox
//                          sorts them), so overlapping batches lock in one order; a deadlock
//                          (40P01) is retried as complete_within retries. With
//                          max_records_per_scope, one claim per request (each counts its scope).
//   complete_batch         one UPDATE ... FROM unnest(...) WHERE fence = u.fence RETURNING.
//   complete_batch_within  BEGIN; the records locked (SELECT ... FOR UPDATE, in key order); the
//                          handler for each one still held; one UPDATE; COMMIT.
// Included by idem/store/postgres.hpp; the statements are sent unprepared (the array's length
// varies, the plan does not).
#ifndef IDEM_STORE_POSTGRES_DETAIL_BATCH_HPP
#define IDEM_STORE_POSTGRES_DETAIL_BATCH_HPP

#include <libpq-fe.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/store/batch.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres/detail/binary_array.hpp>
#include <idem/store/postgres/detail/store.hpp>
#include <idem/store/postgres/detail/wire.hpp>

namespace idem::detail::postgres {

// The batch statements' SQL on `table` (quoted and qualified), given the single claim's SQL
// (claim_sql(table)) so that the batch decides with the very same condition.
struct batch_statements {
  std::string claim;
  std::string complete;
  std::string lock;
};

inline batch_statements batch_sql(const std::string& table) {
  const std::string single = claim_sql(table);
  const std::size_t conflict = single.find("ON CONFLICT");
  const std::size_t returning = single.find(" RETURNING");
  const std::string on_conflict = single.substr(conflict, returning - conflict);
  const auto columns = [](const char* alias) {
    const std::string a(alias);
    return a + ".fence, " + a + ".fingerprint, " + a + ".state, " + a + ".created_at, " + a +
           ".lease_until, " + a + ".expires_at, " + a + ".response, " + a + ".recovery";
  };
  batch_statements sql;
  // $1 scopes, $2 keys, $3 fingerprints, $4 lease, $5 retention, $6 now (NULL: the server's),
  // $7 recovery bytes (NULL elements for none). Columns: decided, scope, key, taken_over, the
  // record (fence ... recovery), the clock (for the rows not decided).
  sql.claim = "WITH clock AS (SELECT " + now_sql(6) +
              " AS n), input AS (SELECT u.scope, u.key, u.fingerprint, u.recovery, u.ord FROM "
              "unnest($1::bytea[], $2::bytea[], $3::bytea[], $7::bytea[]) WITH ORDINALITY AS "
              "u(scope, key, fingerprint, recovery, ord)), decided AS (INSERT INTO " +
              table +
              " AS r (scope, key, fingerprint, state, fence, taken_over, created_at, "
              "lease_until, expires_at, recovery) SELECT i.scope, i.key, i.fingerprint, 0, 1, "
              "false, clock.n, clock.n + $4, clock.n + $5, i.recovery FROM input i CROSS JOIN "
              "clock ORDER BY i.ord " +
              on_conflict + " RETURNING r.scope, r.key, r.taken_over, " + columns("r") +
              ") SELECT true, d.scope, d.key, d.taken_over, " + columns("d") +
              ", NULL::int8 FROM decided d UNION ALL SELECT false, t.scope, t.key, false, " +
              columns("t") + ", clock.n FROM input i CROSS JOIN LATERAL (SELECT * FROM " + table +
              " x WHERE x.scope = i.scope AND x.key = i.key LIMIT 1) t CROSS JOIN clock WHERE "
              "NOT EXISTS "
              "(SELECT 1 FROM decided d WHERE d.scope = i.scope AND d.key = i.key)";
  sql.complete = "UPDATE " + table +
                 " AS t SET state = 1, response = u.response, recovery = NULL FROM "
                 "unnest($1::bytea[], $2::bytea[], $3::int8[], $4::bytea[]) AS u(scope, key, "
                 "fence, response) WHERE t.scope = u.scope AND t.key = u.key AND t.fence = "
                 "u.fence AND t.state <> 2 RETURNING t.scope, t.key";
  sql.lock = "SELECT t.scope, t.key, t.fence, t.state FROM " + table +
             " t JOIN unnest($1::bytea[], $2::bytea[]) AS u(scope, key) ON t.scope = u.scope AND "
             "t.key = u.key ORDER BY t.scope, t.key FOR UPDATE OF t";
  return sql;
}

// (scope, key) -> position, for matching the rows a statement returns to what it was sent.
using batch_index = std::map<std::pair<std::string_view, std::string_view>, std::size_t>;

// A batch statement's parameters: binary, arrays or int8 or NULL.
class batch_parameters {
 public:
  batch_parameters& array(const binary_array& value) {
    arrays_.at(count_) = value.bytes();
    add(value.element() == int8_oid ? int8_array_oid : bytea_array_oid, arrays_.at(count_));
    return *this;
  }
  batch_parameters& int8(std::int64_t value) {
    std::array<char, 8> raw{};
    put_int8(raw, value);
    integers_.at(count_) = raw;
    add(int8_oid, std::string_view(integers_.at(count_).data(), 8));
    return *this;
  }
  batch_parameters& null_int8() {
    types_.at(count_) = int8_oid;
    values_.at(count_) = nullptr;
    lengths_.at(count_) = 0;
    ++count_;
    return *this;
  }

  // Runs `sql` with these parameters, binary results; throws as the store's statements do (a
  // 40001 or 40P01 as postgres_error, for a retry).
  result_ptr run(borrowed_connection& connection, const std::string& sql, const char* what) const {
    static constexpr std::array<int, 8> binary{1, 1, 1, 1, 1, 1, 1, 1};
    result_ptr result{PQexecParams(connection.get(), sql.c_str(), static_cast<int>(count_),
                                   types_.data(), values_.data(), lengths_.data(), binary.data(),
                                   1)};
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
      return borrowed_connection::answered(std::move(result), what);
    }
    connection.fail(result.get(), what, true);
  }

 private:
  void add(Oid type, std::string_view bytes) {
    types_.at(count_) = type;
    values_.at(count_) = bytes.empty() ? "" : bytes.data();
    lengths_.at(count_) = static_cast<int>(bytes.size());
    ++count_;
  }
  std::array<Oid, 8> types_{};
  std::array<const char*, 8> values_{};
  std::array<int, 8> lengths_{};
  std::array<std::array<char, 8>, 8> integers_{};
  std::array<std::string, 8> arrays_{};
  std::size_t count_ = 0;
};

// The batch operations, with the store's private parts (postgres_store befriends this).
struct batch_access {
  using pool = postgres_store::pool;

  // The statements for the store's table, kept per thread for the table last used there.
  static const batch_statements& statements(postgres_store& store) {
    const std::string& table = store.state_checked().names.table;
    thread_local std::string made_for;
    thread_local batch_statements made;
    if (made_for != table) {
      made = batch_sql(table);
      made_for = table;
    }
    return made;
  }

  // Runs `attempt()` again after a deadlock or serialization failure, with the store's backoff.
  template <class Attempt>
  static auto retried(postgres_store& store, const char* what, Attempt&& attempt) {
    const postgres_store::options& config = store.state_checked().config;
    for (unsigned tries = 0;; ++tries) {
      if (tries > 0) wait_before_retry(config.serialization_backoff, tries - 1);
      try {
        return attempt();
      } catch (const postgres_error& error) {
        if (tries >= config.max_serialization_retries) {
          throw store_error(store_failure::unavailable,
                            std::string("idem::postgres_store: ") + what + " gave up after " +
                                std::to_string(tries + 1) +
                                " deadlocks or serialization failures; the last: " + error.what());
        }
      }
    }
  }

  static std::vector<claim_result> claim_batch(postgres_store& store,
                                               std::span<const claim_request> requests) {
    std::vector<claim_result> answers(requests.size());
    if (requests.empty()) return answers;
    const pool& shared = store.state_checked();
    if (shared.config.max_records_per_scope != std::numeric_limits<std::size_t>::max()) {
      for (std::size_t i = 0; i < requests.size(); ++i)
        answers[i] = store.claim(requests[i]);
      return answers;
    }
    const claim_request& first = requests.front();
    if (first.lease <= std::chrono::nanoseconds::zero() ||
        first.retention <= std::chrono::nanoseconds::zero()) {
      throw std::invalid_argument("idem::postgres_store: lease and retention must be positive");
    }
    binary_array scopes(bytea_oid);
    binary_array keys(bytea_oid);
    binary_array prints(bytea_oid);
    binary_array recoveries(bytea_oid);
    batch_index where;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const claim_request& request = requests[i];
      scopes.add(request.scope);
      keys.add(request.key);
      prints.add(request.fingerprint);
      if (request.recovery.empty()) {
        recoveries.add_null();
      } else {
        recoveries.add(request.recovery);
      }
      if (!where.emplace(std::pair{request.scope, request.key}, i).second) {
        throw std::invalid_argument(
            "idem::postgres_store::claim_batch: a (scope, key) appears twice in one batch");
      }
    }
    batch_parameters values;
    values.array(scopes)
        .array(keys)
        .array(prints)
        .int8(first.lease.count())
        .int8(first.retention.count());
    if (store.caller_time()) {
      values.int8(to_nanoseconds(first.now));
    } else {
      values.null_int8();
    }
    values.array(recoveries);
    const std::string& sql = statements(store).claim;
    const result_ptr result = retried(store, "claim_batch", [&] {
      borrowed_connection connection = store.state_checked().acquire();
      return values.run(connection, sql, "claim_batch");
    });
    std::vector<bool> answered(requests.size(), false);
    const PGresult* rows = result.get();
    for (int row = 0; row < PQntuples(rows); ++row) {
      const auto found = where.find(std::pair{get_bytes(rows, row, 1), get_bytes(rows, row, 2)});
      if (found == where.end()) continue;
      const std::size_t i = found->second;
      claim_result& answer = answers[i];
      if (PQgetvalue(rows, row, 0)[0] != 0) {
        answer.fence = static_cast<std::uint64_t>(get_int(rows, row, 4));
        if (PQgetvalue(rows, row, 3)[0] != 0) {
          answer.status = claim_status::taken_over;
          read_record(rows, row, 4, answer.existing);
        } else {
          answer.status = claim_status::claimed;
        }
        answered[i] = true;
        continue;
      }
      read_record(rows, row, 4, answer.existing);
      const std::int64_t now = get_int(rows, row, 12);
      const bool released = get_int(rows, row, 6) == released_state;
      const bool claimable = answer.existing.state == record_state::in_progress &&
                             answer.existing.fingerprint == requests[i].fingerprint &&
                             to_nanoseconds(answer.existing.lease_until) <= now;
      if (released || to_nanoseconds(answer.existing.expires_at) <= now || claimable) continue;
      answer.status = claim_status::existing;
      answered[i] = true;
    }
    // What the statement's snapshot could not explain is asked again, alone.
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (!answered[i]) answers[i] = store.claim(requests[i]);
    }
    return answers;
  }

  // The complete statement's parameters for `done` (or, with `only`, the entries it marks).
  static batch_parameters completion_values(std::span<const batch_completion> done,
                                            binary_array& scopes, binary_array& keys,
                                            binary_array& fences, binary_array& responses,
                                            batch_index& where) {
    for (std::size_t i = 0; i < done.size(); ++i) {
      scopes.add(done[i].held.scope);
      keys.add(done[i].held.key);
      fences.add(fence_of(done[i].held));
      responses.add(done[i].response);
      where.emplace(std::pair{done[i].held.scope, done[i].held.key}, i);
    }
    batch_parameters values;
    values.array(scopes).array(keys).array(fences).array(responses);
    return values;
  }

  // Marks in `applied` the entries whose rows `result` returned.
  static std::size_t mark_applied(const PGresult* rows, const batch_index& where,
                                  std::vector<bool>& applied) {
    std::size_t marked = 0;
    for (int row = 0; row < PQntuples(rows); ++row) {
      const auto found = where.find(std::pair{get_bytes(rows, row, 0), get_bytes(rows, row, 1)});
      if (found != where.end() && !applied[found->second]) {
        applied[found->second] = true;
        ++marked;
      }
    }
    return marked;
  }

  static std::vector<bool> complete_batch(postgres_store& store,
                                          std::span<const batch_completion> done) {
    std::vector<bool> applied(done.size(), false);
    if (done.empty()) return applied;
    binary_array scopes(bytea_oid);
    binary_array keys(bytea_oid);
    binary_array fences(int8_oid);
    binary_array responses(bytea_oid);
    batch_index where;
    const batch_parameters values = completion_values(done, scopes, keys, fences, responses, where);
    const std::string& sql = statements(store).complete;
    const result_ptr result = retried(store, "complete_batch", [&] {
      borrowed_connection connection = store.state_checked().acquire();
      return values.run(connection, sql, "complete_batch");
    });
    (void)mark_applied(result.get(), where, applied);
    return applied;
  }

  template <class Produce>
  static std::vector<bool> complete_batch_within(postgres_store& store,
                                                 std::span<const fenced_key> held, store_time now,
                                                 Produce& produce);
};

}  // namespace idem::detail::postgres

namespace idem {

inline std::vector<claim_result> postgres_store::claim_batch(
    std::span<const claim_request> requests) {
  return detail::postgres::batch_access::claim_batch(*this, requests);
}

inline std::vector<bool> postgres_store::complete_batch(std::span<const batch_completion> done,
                                                        store_time /*now*/) {
  return detail::postgres::batch_access::complete_batch(*this, done);
}

template <class Produce>
std::vector<bool> postgres_store::complete_batch_within(std::span<const fenced_key> held,
                                                        store_time now, Produce&& produce) {
  return detail::postgres::batch_access::complete_batch_within(*this, held, now, produce);
}

template <class Produce>
std::vector<bool> detail::postgres::batch_access::complete_batch_within(
    postgres_store& store, std::span<const fenced_key> held, store_time now, Produce& produce) {
  std::vector<bool> applied(held.size(), false);
  if (held.empty()) return applied;
  pool& shared = store.state_checked();
  const char* begin = "BEGIN ISOLATION LEVEL READ COMMITTED";
  if (shared.config.transaction_isolation == postgres_store::isolation::repeatable_read) {
    begin = "BEGIN ISOLATION LEVEL REPEATABLE READ";
  } else if (shared.config.transaction_isolation == postgres_store::isolation::serializable) {
    begin = "BEGIN ISOLATION LEVEL SERIALIZABLE";
  }
  binary_array lock_scopes(bytea_oid);
  binary_array lock_keys(bytea_oid);
  batch_index where;
  for (std::size_t i = 0; i < held.size(); ++i) {
    lock_scopes.add(held[i].scope);
    lock_keys.add(held[i].key);
    where.emplace(std::pair{held[i].scope, held[i].key}, i);
  }
  batch_parameters lock_values;
  lock_values.array(lock_scopes).array(lock_keys);
  const batch_statements& sql = statements(store);
  const std::optional<std::int64_t> written_at =
      shared.config.clock == time_source::caller ? std::optional<std::int64_t>{to_nanoseconds(now)}
                                                 : std::nullopt;
  for (unsigned attempt = 0;; ++attempt) {
    if (attempt > 0) wait_before_retry(shared.config.serialization_backoff, attempt - 1);
    borrowed_connection connection = shared.acquire();
    bool retry = false;
    try {
      connection.run_text(begin, "complete_batch_within: begin", true);
      // Locked for the whole transaction, in key order: a takeover waits for it to end.
      const result_ptr locked =
          lock_values.run(connection, sql.lock, "complete_batch_within: lock");
      std::vector<bool> still(held.size(), false);
      for (int row = 0; row < PQntuples(locked.get()); ++row) {
        const auto found =
            where.find(std::pair{get_bytes(locked.get(), row, 0), get_bytes(locked.get(), row, 1)});
        if (found == where.end()) continue;
        still[found->second] = static_cast<std::uint64_t>(get_int(locked.get(), row, 2)) ==
                                   held[found->second].fence &&
                               get_int(locked.get(), row, 3) == 0;
      }
      std::vector<std::string> responses(held.size());
      std::vector<batch_completion> done;
      for (std::size_t i = 0; i < held.size(); ++i) {
        if (!still[i]) continue;
        postgres_store::transaction txn(&store, &connection, held[i], written_at);
        try {
          responses[i] = produce(txn, i);
        } catch (...) {
          // A handler that turned a serialization failure into an exception of its own still
          // ran in an aborted transaction: the batch runs again, as for postgres_error.
          retry = txn.retry_;
          throw;
        }
        if (txn.retry_) {
          throw postgres_error("40001",
                               "idem::postgres_store: complete_batch_within: the handler's "
                               "transaction hit a serialization failure");
        }
        done.push_back(batch_completion{held[i], responses[i]});
      }
      if (done.empty()) {
        connection.roll_back();
        return applied;
      }
      binary_array scopes(bytea_oid);
      binary_array keys(bytea_oid);
      binary_array fences(int8_oid);
      binary_array bytes(bytea_oid);
      batch_index completed;
      const batch_parameters values =
          completion_values(done, scopes, keys, fences, bytes, completed);
      const result_ptr result =
          values.run(connection, sql.complete, "complete_batch_within: complete");
      std::vector<bool> marks(done.size(), false);
      if (mark_applied(result.get(), completed, marks) != done.size()) {
        // The rows were locked and checked: this cannot happen short of a bug; nothing commits.
        connection.roll_back();
        return applied;
      }
      connection.run_text("COMMIT", "complete_batch_within: commit", true);
      return still;
    } catch (const postgres_error& error) {
      connection.roll_back();
      if (!error.retryable()) throw;
      if (attempt >= shared.config.max_serialization_retries) {
        throw store_error(store_failure::unavailable,
                          "idem::postgres_store: complete_batch_within gave up after " +
                              std::to_string(attempt + 1) +
                              " serialization failures or deadlocks; the last: " + error.what());
      }
    } catch (...) {
      connection.roll_back();
      if (!retry) throw;
      if (attempt >= shared.config.max_serialization_retries) {
        throw store_error(store_failure::unavailable,
                          "idem::postgres_store: complete_batch_within gave up after " +
                              std::to_string(attempt + 1) + " serialization failures or deadlocks");
      }
    }
  }
}

}  // namespace idem

#endif  // IDEM_STORE_POSTGRES_DETAIL_BATCH_HPP
