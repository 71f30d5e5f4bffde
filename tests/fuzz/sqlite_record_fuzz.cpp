// Fuzz target: how sqlite_store reads the rows of idem_records. Another process, another version
// of the application or a damaged file can leave any value of any SQLite type in any column; the
// store must read it without undefined behaviour and answer only with a record or store_error.
// SQLite is embedded, so the real store runs here on a temporary file, and the row is written
// with plain SQL beside it.
//
// Input: scope and key (a length byte each), `now`, then per column a type byte and a value.
// Properties:
//  * find, stuck and claim return or throw store_error, for any row;
//  * a well-formed row (integers where idem writes integers, state 0-2, blobs of the sizes idem
//    writes) is read back field for field: find answers it when it is live and unreleased, and
//    nothing otherwise; stuck lists it exactly when it is in progress with its lease run out;
//  * claim on a well-formed row follows the contract of idem/store/contract.hpp: a new claim (fence
//  + 1)
//    over a released or expired row, a takeover (fence + 1) of an abandoned one, and otherwise
//    the row as it is.
#include <idem/store/sqlite.hpp>

#include <sqlite3.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "support/temporary_directory.hpp"

namespace {

using idem_fuzz::fuzz_require;

struct fixture {
  idem::testing::temporary_directory directory{"idem-fuzz-sqlite"};
  idem::sqlite_store store;
  sqlite3* raw = nullptr;
  sqlite3_stmt* insert = nullptr;

  fixture() {
    idem::sqlite_store::options options;
    options.path = directory.file("records.sqlite3");
    options.synchronous = idem::sqlite_store::synchronous_mode::normal;
    options.pool_size = 1;
    store = idem::sqlite_store(options);
    static_cast<void>(store.find("s", "k", idem::store_time{}));  // creates the schema
    fuzz_require(sqlite3_open(options.path.c_str(), &raw) == SQLITE_OK, "open the file");
    // The rows this connection writes need no durability, and an fsync per input would slow
    // the fuzzer to a hundred inputs a second.
    fuzz_require(
        sqlite3_exec(raw, "PRAGMA synchronous = OFF", nullptr, nullptr, nullptr) == SQLITE_OK,
        "turn off fsync for the fuzzer's own writes");
    fuzz_require(sqlite3_prepare_v2(raw,
                                    "INSERT INTO idem_records (scope, key, state, fence, "
                                    "created_at, lease_until, expires_at, fingerprint, "
                                    "response, recovery) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, "
                                    "?9, ?10)",
                                    -1, &insert, nullptr) == SQLITE_OK,
                 "prepare the insert");
  }
  fixture(const fixture&) = delete;
  fixture& operator=(const fixture&) = delete;
  ~fixture() {
    sqlite3_finalize(insert);
    sqlite3_close(raw);
  }
};

fixture& shared() {
  static fixture instance;
  return instance;
}

// One column's value: its SQLite type and, for the checks, what it holds.
struct column {
  int type = SQLITE_INTEGER;
  std::int64_t integer = 0;
  std::string bytes;
};

column read_column(idem_fuzz::input_reader& in) {
  column out;
  switch (in.byte() % 5) {
    case 0:
    case 1:
      out.type = SQLITE_INTEGER;
      out.integer = static_cast<std::int64_t>(in.u64());
      break;
    case 2:
      out.type = SQLITE_BLOB;
      out.bytes = in.piece();
      break;
    case 3:
      out.type = SQLITE_TEXT;
      out.bytes = in.piece();
      break;
    default:
      out.type = SQLITE_FLOAT;
      out.integer = static_cast<std::int64_t>(in.u64());
      break;
  }
  return out;
}

void bind(sqlite3_stmt* statement, int index, const column& value) {
  switch (value.type) {
    case SQLITE_INTEGER:
      sqlite3_bind_int64(statement, index, value.integer);
      break;
    case SQLITE_BLOB:
      sqlite3_bind_blob(statement, index, value.bytes.data(), static_cast<int>(value.bytes.size()),
                        SQLITE_TRANSIENT);
      break;
    case SQLITE_TEXT:
      sqlite3_bind_text(statement, index, value.bytes.data(), static_cast<int>(value.bytes.size()),
                        SQLITE_TRANSIENT);
      break;
    default:
      sqlite3_bind_double(statement, index, static_cast<double>(value.integer) / 3.0);
      break;
  }
}

idem::store_time at(std::int64_t nanoseconds) {
  return idem::store_time{std::chrono::duration_cast<idem::store_time::duration>(
      std::chrono::nanoseconds{nanoseconds})};
}

idem::digest digest_of(std::string_view bytes) {
  return idem::digest{std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size())};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fixture& f = shared();
  idem_fuzz::input_reader in(data, size);
  const std::string scope(in.piece());
  const std::string key(in.piece());
  const auto now_ns = static_cast<std::int64_t>(in.u64());
  const idem::store_time now = at(now_ns);
  // state, fence, created_at, lease_until, expires_at, fingerprint, response, recovery
  std::vector<column> columns;
  for (int i = 0; i < 8; ++i)
    columns.push_back(read_column(in));

  fuzz_require(
      sqlite3_exec(f.raw, "DELETE FROM idem_records", nullptr, nullptr, nullptr) == SQLITE_OK,
      "clear the table");
  sqlite3_reset(f.insert);
  sqlite3_clear_bindings(f.insert);
  sqlite3_bind_blob(f.insert, 1, scope.data(), static_cast<int>(scope.size()), SQLITE_TRANSIENT);
  sqlite3_bind_blob(f.insert, 2, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  for (int i = 0; i < 8; ++i)
    bind(f.insert, i + 3, columns[static_cast<std::size_t>(i)]);
  if (sqlite3_step(f.insert) != SQLITE_DONE) return 0;  // a value the schema refuses

  const auto integer = [&](std::size_t i) { return columns[i].type == SQLITE_INTEGER; };
  const auto blob = [&](std::size_t i) { return columns[i].type == SQLITE_BLOB; };
  const std::int64_t state = columns[0].integer;
  const bool well_formed = integer(0) && state >= 0 && state <= 2 && integer(1) &&
                           columns[1].integer >= 1 && integer(2) && integer(3) && integer(4) &&
                           blob(5) && columns[5].bytes.size() <= idem::digest::max_size &&
                           blob(6) && blob(7);
  const bool live = columns[4].integer > now_ns && state != 2;

  std::optional<idem::record> found;
  std::vector<idem::record> stuck;
  try {
    found = f.store.find(scope, key, now);
    stuck = f.store.stuck(now, 4);
  } catch (const idem::store_error&) {
    fuzz_require(!well_formed, "a well-formed row reads without error");
    return 0;
  }
  if (!well_formed) return 0;

  fuzz_require(found.has_value() == live, "find answers a row exactly when it is live");
  if (found) {
    fuzz_require(found->scope == scope && found->key == key, "find answers the scope and key");
    fuzz_require(found->state ==
                     (state == 1 ? idem::record_state::completed : idem::record_state::in_progress),
                 "the state reads back");
    fuzz_require(found->fence == static_cast<std::uint64_t>(columns[1].integer),
                 "the fence reads back");
    fuzz_require(found->created_at == at(columns[2].integer) &&
                     found->lease_until == at(columns[3].integer) &&
                     found->expires_at == at(columns[4].integer),
                 "the times read back");
    fuzz_require(found->fingerprint == digest_of(columns[5].bytes), "the fingerprint reads back");
    fuzz_require(found->response == columns[6].bytes && found->recovery == columns[7].bytes,
                 "the response and recovery bytes read back");
  }
  const bool abandoned = live && state == 0 && columns[3].integer <= now_ns;
  fuzz_require(stuck.size() == (abandoned ? 1U : 0U),
               "stuck lists a row exactly when it is in progress past its lease");
  if (abandoned) {
    fuzz_require(stuck.front().scope == scope && stuck.front().key == key &&
                     stuck.front().fence == found->fence,
                 "stuck names the row");
  }

  // A claim with the row's own fingerprint. The lease and retention keep every time it writes
  // inside int64 nanoseconds; a `now` near the end of time would overflow them, so skip those.
  constexpr std::int64_t hour = 3'600'000'000'000;
  if (now_ns > std::numeric_limits<std::int64_t>::max() - 2 * hour ||
      columns[1].integer == std::numeric_limits<std::int64_t>::max()) {
    return 0;
  }
  idem::claim_request request;
  request.scope = scope;
  request.key = key;
  request.fingerprint = digest_of(columns[5].bytes);
  request.now = now;
  request.lease = std::chrono::minutes(1);
  request.retention = std::chrono::hours(1);
  idem::claim_result claimed;
  try {
    claimed = f.store.claim(request);
  } catch (const idem::store_error&) {
    fuzz_require(false, "a claim over a well-formed row answers");
  }
  const auto next = static_cast<std::uint64_t>(columns[1].integer) + 1;
  if (!live) {
    fuzz_require(claimed.status == idem::claim_status::claimed && claimed.fence == next,
                 "a claim over a released or expired row is new, one fence higher");
  } else if (abandoned) {
    fuzz_require(claimed.status == idem::claim_status::taken_over && claimed.fence == next,
                 "a claim over an abandoned row takes it over, one fence higher");
    fuzz_require(claimed.existing.recovery == columns[7].bytes, "a takeover keeps the recovery");
  } else {
    fuzz_require(claimed.status == idem::claim_status::existing,
                 "a claim over a live row it may not take answers existing");
    fuzz_require(
        claimed.existing.fence == found->fence && claimed.existing.response == found->response,
        "existing is the row as it is");
  }
  return 0;
}
