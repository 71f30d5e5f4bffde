// The PostgreSQL outbox as a relay reads it: idem::postgres_outbox::reader satisfies
// idem::Outbox (idem/outbox/source.hpp), on a connection of its own.
//
//   idem::postgres_outbox::reader outbox{{.conninfo = "...", .table = "idem_records"}};
//   auto batch = outbox.fetch(100, now);       // BEGIN; claim due rows FOR UPDATE SKIP LOCKED
//   sink.publish(batch.entries(), results);
//   outbox.settle(batch, settlements, now);    // the updates and COMMIT, same transaction
//
// What a user must know:
// * Several relays, each with its own reader, share one outbox: a batch is a set of rows locked
//   in the batch's open transaction, and other readers skip locked rows, so no row is in two
//   batches at once and none waits for another relay. A relay that dies mid-batch loses its
//   connection, the server rolls its transaction back, and its rows are fetched again (at
//   least once, never lost). A relay paused mid-batch holds its rows until
//   idle_in_transaction_timeout ends its session.
// * Order: per partition key, in sequence order. fetch leaves out every row an earlier
//   unpublished row of its key holds back (not due yet, claimed by another relay, or past the
//   batch's end), so a retried message is never overtaken by a later one of its key. A
//   sequence is drawn at the insert, not the commit: sequence order is commit order for one key
//   when that key's writers do not overlap (they lock the aggregate's row, or idem's claim of
//   one key serialises them). Overlapping writers of one key may commit a lower sequence after
//   a higher one was sent. docs/outbox_relay.md says it all.
// * wait_for_rows is a hint: the reader LISTENs, and returns on a notification or at the
//   timeout, never reading a row itself. The schema's trigger that NOTIFYs on every insert is
//   off by default (a notifying commit takes a database-wide lock: a quarter to a third of the
//   commit rate under concurrent writers); without it relays poll at their idle wait. Turn it on
//   with ALTER TABLE <table>_outbox ENABLE TRIGGER idem_outbox_notify (docs/outbox_relay.md).
// * Not thread-safe: one reader per relay thread. A batch must not outlive its reader's
//   connection state, which it shares (destroying the reader first is safe: the batch then
//   does nothing).
// * Failures: a lost connection (or a server shutting down) throws store_error(unavailable)
//   and the next fetch reconnects; a batch open then is gone, its rows released by the server.
//   A COMMIT lost with its connection may or may not have happened: the rows are then either
//   published or sent again, never lost. Every other server error rolls the batch back and
//   throws store_error.
#ifndef IDEM_STORE_POSTGRES_OUTBOX_READER_HPP
#define IDEM_STORE_POSTGRES_OUTBOX_READER_HPP

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <idem/outbox/dead_letter.hpp>
#include <idem/outbox/headers.hpp>
#include <idem/outbox/sink.hpp>
#include <idem/outbox/source.hpp>
#include <idem/store/contract.hpp>
#include <idem/store/postgres/detail/failure.hpp>
#include <idem/store/postgres/detail/outbox_sql.hpp>
#include <idem/store/postgres/detail/schema.hpp>
#include <idem/store/postgres/detail/statements.hpp>
#include <idem/store/postgres/detail/wire.hpp>

namespace idem::detail::postgres {

// The longest sink error kept (last_error, a dead letter's reason): enough for any message a
// person reads, and a misbehaving sink cannot grow a row without bound.
inline constexpr std::size_t max_stored_error_bytes = 4096;

// A sink's error as the text columns can always take it, whatever the database's encoding:
// printable ASCII, tab and newline as they are, every other byte as \xNN (a NUL would be refused
// by any text column, a stray UTF-8 byte by a UTF-8 database, and a refused settle would block
// the batch forever). Cut at max_stored_error_bytes.
inline std::string storable_error(std::string_view error) {
  static constexpr std::string_view hex = "0123456789abcdef";
  std::string out;
  for (const char c : error) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte >= 0x20 && byte < 0x7f && byte != '\\') || byte == '\t' || byte == '\n') {
      out += c;
    } else if (byte == '\\') {
      out += "\\\\";
    } else {
      out += "\\x";
      out += hex[byte >> 4];
      out += hex[byte & 0xf];
    }
    if (out.size() >= max_stored_error_bytes) {
      out.resize(max_stored_error_bytes);
      out += "...";
      break;
    }
  }
  return out;
}

inline std::int64_t outbox_nanoseconds(std::chrono::system_clock::time_point time) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}
inline std::chrono::system_clock::time_point outbox_time(std::int64_t nanoseconds) noexcept {
  return std::chrono::system_clock::time_point{
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds{nanoseconds})};
}

// Decodes the columns outbox_entry_columns names, from column 0. Headers that are not
// netstrings throw std::invalid_argument (decode_outbox_headers).
inline outbox_entry read_outbox_entry(const PGresult* result, int row) {
  outbox_entry entry;
  entry.sequence = get_int(result, row, 0);
  entry.id = get_bytes(result, row, 1);
  entry.message.topic = get_bytes(result, row, 2);
  entry.message.partition_key = get_bytes(result, row, 3);
  entry.created_at = outbox_time(get_int(result, row, 4));
  entry.attempts = static_cast<std::uint32_t>(get_int(result, row, 5));
  entry.message.payload = get_bytes(result, row, 7);
  entry.message.headers = decode_outbox_headers(get_bytes(result, row, 6));
  return entry;
}

// What a reader and its batches share: the connection, and which transaction is open on it.
// `generation` counts the transactions that ended (and connections lost), so a batch knows
// whether the transaction it was fetched in is still the open one.
struct outbox_session {
  connection_ptr connection;
  std::uint64_t generation = 0;
  bool batch_open = false;

  // Ends the open batch's transaction (if any) without writing; a connection that cannot roll
  // back is dropped, which the server takes as a rollback too.
  void release_batch() noexcept {
    if (!batch_open) return;
    batch_open = false;
    ++generation;
    if (!connection) return;
    const result_ptr result{PQexec(connection.get(), "ROLLBACK")};
    if (!result || PQresultStatus(result.get()) != PGRES_COMMAND_OK) connection.reset();
  }
  void drop_connection() noexcept {
    connection.reset();
    if (batch_open) ++generation;
    batch_open = false;
  }
};

}  // namespace idem::detail::postgres

namespace idem::postgres_outbox {

/// Reads <schema>.<table>_outbox for a relay (see the top of this header). Satisfies
/// idem::Outbox.
class reader {
 public:
  /// Every option and its default: docs/outbox_relay.md#the-postgresql-relay.
  struct options {
    /// A libpq connection string or URI (as postgres_store::options::conninfo).
    std::string conninfo{};
    /// The store whose outbox this reads: its schema and records table, as in
    /// postgres_store::options (and postgres_outbox::target).
    std::string schema = "public";
    std::string table = "idem_records";
    /// LISTEN for the writers' NOTIFY, so wait_for_rows returns when rows arrive. false:
    /// wait_for_rows always waits its whole timeout (polling).
    bool listen = true;
    /// Each statement's limit on the server (statement_timeout); zero: none.
    std::chrono::milliseconds statement_timeout{5000};
    /// How long a batch may stay open without a statement (the sink's time between fetch and
    /// settle) before the server ends the session and releases the batch's rows to the other
    /// relays (idle_in_transaction_session_timeout); zero: never. A relay paused mid-batch
    /// holds its rows until then.
    std::chrono::milliseconds idle_in_transaction_timeout{60000};
    /// Connecting: libpq's connect_timeout, unless conninfo sets its own.
    std::chrono::milliseconds connect_timeout{10000};
    /// Connect, migrate (or refuse a newer schema) and LISTEN in the constructor, which then
    /// throws; false: the first fetch does it.
    bool connect_at_start = true;
  };

  /// A claimed set of rows: locked in the reader's open transaction until settle, or until
  /// it is destroyed unsettled (rolled back: its rows are fetched again).
  class batch {
   public:
    batch() = default;
    batch(batch&& other) noexcept
        : session_(std::move(other.session_)),
          generation_(other.generation_),
          entries_(std::move(other.entries_)),
          broken_(std::move(other.broken_)),
          open_(std::exchange(other.open_, false)) {}
    batch& operator=(batch&& other) noexcept {
      if (this != &other) {
        release();
        session_ = std::move(other.session_);
        generation_ = other.generation_;
        entries_ = std::move(other.entries_);
        broken_ = std::move(other.broken_);
        open_ = std::exchange(other.open_, false);
      }
      return *this;
    }
    batch(const batch&) = delete;
    batch& operator=(const batch&) = delete;
    ~batch() { release(); }

    std::span<const outbox_entry> entries() const noexcept { return entries_; }

   private:
    friend class reader;
    struct broken_row {
      std::int64_t sequence = 0;
      std::string reason;
    };

    // Still the transaction the reader has open.
    bool current() const noexcept {
      return open_ && session_ && session_->batch_open && session_->generation == generation_;
    }
    void release() noexcept {
      if (current()) session_->release_batch();
      open_ = false;
    }

    std::shared_ptr<detail::postgres::outbox_session> session_;
    std::uint64_t generation_ = 0;
    std::vector<outbox_entry> entries_;
    std::vector<broken_row> broken_;
    bool open_ = false;
  };

  /// Validates the names (std::invalid_argument, as postgres_store); with connect_at_start,
  /// connects, migrates the store's schema (the same migration, under the same lock: a table
  /// from a newer idem is refused with store_error(unavailable) saying so) and LISTENs.
  explicit reader(options config)
      : config_(std::move(config)),
        names_(detail::postgres::quote_names(config_.schema, config_.table)),
        fetch_sql_(detail::postgres::outbox_fetch_sql(names_)),
        settle_sql_(detail::postgres::outbox_settle_sql(names_)),
        session_(std::make_shared<detail::postgres::outbox_session>()) {
    if (config_.connect_at_start) connected();
  }
  // One connection, one reader: a copy would share the batch's transaction.
  reader(const reader&) = delete;
  reader& operator=(const reader&) = delete;
  reader(reader&&) noexcept = default;
  reader& operator=(reader&&) noexcept = default;
  ~reader() = default;

  /// Claims at most `limit` due rows in sequence order, leaving out those an earlier
  /// unpublished row of their key holds back. A batch still open on this reader is rolled
  /// back first (settling it then throws outbox_claim_lost). A row whose headers are not
  /// netstrings (written by hand) is not handed on: it goes to the dead letters, with the
  /// decoder's message, when the batch is settled. An empty batch holds nothing.
  batch fetch(std::size_t limit, std::chrono::system_clock::time_point now) {
    namespace pg = detail::postgres;
    session_->release_batch();
    batch claimed;
    claimed.session_ = session_;
    if (limit == 0) return claimed;
    connected();
    run_text("BEGIN", "fetch: begin");
    session_->batch_open = true;
    pg::parameters values;
    values.int8(pg::outbox_nanoseconds(now));
    values.int8(static_cast<std::int64_t>(std::min<std::size_t>(limit, max_limit)));
    const pg::result_ptr rows = run_prepared(fetch_statement, values, "fetch");
    // Kept: the rows in the batch, broken ones included (they leave the outbox with it), by
    // sequence; a row is kept when its key's previous unpublished row is none or kept.
    std::vector<std::int64_t> kept;
    const int count = PQntuples(rows.get());
    for (int row = 0; row < count; ++row) {
      const std::int64_t sequence = pg::get_int(rows.get(), row, 0);
      if (PQgetisnull(rows.get(), row, 8) == 0) {
        const std::int64_t previous = pg::get_int(rows.get(), row, 8);
        // `kept` is sorted: rows arrive in sequence order.
        if (!std::binary_search(kept.begin(), kept.end(), previous)) continue;
      }
      kept.push_back(sequence);
      try {
        claimed.entries_.push_back(pg::read_outbox_entry(rows.get(), row));
      } catch (const std::invalid_argument& error) {
        claimed.broken_.push_back({sequence, pg::storable_error(error.what())});
      }
    }
    claimed.generation_ = session_->generation;
    claimed.open_ = true;
    if (claimed.entries_.empty()) {
      // Nothing to hand on: end the claim now rather than hold rows the relay will not settle
      // (an empty batch may never be), burying the broken rows first.
      write_settlements(claimed, {}, now);
    }
    return claimed;
  }

  /// Writes one settlement per entry (published, retry, dead, untouched) and commits, in the
  /// batch's transaction. Throws std::invalid_argument when the counts differ and
  /// std::logic_error for a batch settled before or another reader's (nothing written, the
  /// batch still open); outbox_claim_lost when the batch's transaction already ended (a later
  /// fetch, a lost connection: its rows were released unchanged); store_error otherwise.
  void settle(batch& claimed, std::span<const outbox_settlement> settlements,
              std::chrono::system_clock::time_point now) {
    if (claimed.session_ != session_) {
      throw std::logic_error(
          "idem::postgres_outbox::reader::settle: the batch was not fetched by this reader");
    }
    if (settlements.size() != claimed.entries_.size()) {
      throw std::invalid_argument(
          "idem::postgres_outbox::reader::settle: " + std::to_string(settlements.size()) +
          " settlements for " + std::to_string(claimed.entries_.size()) +
          " entries; there must be one per entry");
    }
    if (!claimed.open_) {
      if (claimed.entries_.empty()) return;  // an empty batch was settled at fetch
      throw std::logic_error(
          "idem::postgres_outbox::reader::settle: the batch was settled already");
    }
    if (!claimed.current()) {
      claimed.open_ = false;
      throw outbox_claim_lost(
          "idem::postgres_outbox::reader::settle: the batch's transaction ended before it was "
          "settled (a later fetch, or the connection was lost): nothing was written, and its "
          "rows will be fetched again");
    }
    write_settlements(claimed, settlements, now);
  }

  /// Deletes at most `limit` rows published before `published_before`, oldest first; answers
  /// how many. Run between batches (inside an open one it commits or rolls back with it).
  std::size_t purge(std::chrono::system_clock::time_point published_before, std::size_t limit) {
    namespace pg = detail::postgres;
    if (limit == 0) return 0;
    connected();
    pg::parameters values;
    values.int8(pg::outbox_nanoseconds(published_before));
    values.int8(static_cast<std::int64_t>(std::min<std::size_t>(limit, max_limit)));
    static constexpr std::array<Oid, 2> types{pg::int8_oid, pg::int8_oid};
    const pg::result_ptr result = run(purge_sql(), values, types.data(), "purge");
    const char* removed = PQcmdTuples(result.get());
    return *removed == '\0' ? 0 : static_cast<std::size_t>(std::stoull(removed));
  }

  /// How many rows wait (due or not) and when the oldest was written.
  outbox_backlog backlog(std::chrono::system_clock::time_point /*now*/) {
    namespace pg = detail::postgres;
    connected();
    const pg::result_ptr result =
        run(pg::outbox_backlog_sql(names_), pg::parameters{}, nullptr, "backlog");
    outbox_backlog answer;
    answer.waiting = static_cast<std::size_t>(pg::get_int(result.get(), 0, 0));
    if (PQgetisnull(result.get(), 0, 1) == 0) {
      answer.oldest_created_at = pg::outbox_time(pg::get_int(result.get(), 0, 1));
    }
    return answer;
  }

  /// Returns when a writer's NOTIFY arrived (or had arrived since the last call), or after
  /// `timeout`. A hint only: a notification may come for rows another relay takes, and rows
  /// whose retry comes due send none, so the relay fetches after every return. Without a
  /// connection, or with listen off, it waits the whole timeout; the next fetch reconnects and
  /// reports what failed.
  void wait_for_rows(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    PGconn* connection = session_->connection.get();
    if (!config_.listen || connection == nullptr || session_->batch_open) {
      std::this_thread::sleep_until(deadline);
      return;
    }
    for (;;) {
      if (PQconsumeInput(connection) == 0) {
        session_->drop_connection();
        std::this_thread::sleep_until(deadline);
        return;
      }
      bool notified = false;
      while (PGnotify* notification = PQnotifies(connection)) {
        PQfreemem(notification);
        notified = true;
      }
      if (notified) return;
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return;
      pollfd socket{PQsocket(connection), POLLIN, 0};
      const int ready = ::poll(
          &socket, 1,
          static_cast<int>(std::min<std::int64_t>(left.count(), std::numeric_limits<int>::max())));
      if (ready < 0 && errno != EINTR) {
        std::this_thread::sleep_until(deadline);
        return;
      }
    }
  }

  /// The dead letters after sequence `after`, at most `limit`, in sequence order (oldest
  /// first): page with the last one's sequence.
  std::vector<outbox_dead_letter> dead_letters(std::size_t limit, std::int64_t after = 0) {
    namespace pg = detail::postgres;
    connected();
    pg::parameters values;
    values.int8(after);
    values.int8(static_cast<std::int64_t>(std::min<std::size_t>(limit, max_limit)));
    static constexpr std::array<Oid, 2> types{pg::int8_oid, pg::int8_oid};
    const pg::result_ptr result =
        run(pg::outbox_dead_letters_sql(names_), values, types.data(), "dead letters");
    std::vector<outbox_dead_letter> letters;
    for (int row = 0; row < PQntuples(result.get()); ++row) {
      outbox_dead_letter letter;
      letter.dead_at = pg::outbox_time(pg::get_int(result.get(), row, 8));
      letter.reason = pg::get_bytes(result.get(), row, 9);
      try {
        letter.entry = pg::read_outbox_entry(result.get(), row);
      } catch (const std::invalid_argument&) {
        // Buried for its headers: everything else is still worth showing.
        letter.entry.sequence = pg::get_int(result.get(), row, 0);
        letter.entry.id = pg::get_bytes(result.get(), row, 1);
        letter.entry.message.topic = pg::get_bytes(result.get(), row, 2);
        letter.entry.message.partition_key = pg::get_bytes(result.get(), row, 3);
        letter.entry.created_at = pg::outbox_time(pg::get_int(result.get(), row, 4));
        letter.entry.attempts = static_cast<std::uint32_t>(pg::get_int(result.get(), row, 5));
        letter.entry.message.payload = pg::get_bytes(result.get(), row, 7);
      }
      letters.push_back(std::move(letter));
    }
    return letters;
  }

  /// Moves the dead letters with these sequences back into the outbox, due at `now`, and
  /// answers what became of each, in the order asked (idem/outbox/dead_letter.hpp). A requeued
  /// one gets attempts 0 and a new sequence (after everything its key wrote so far); its id,
  /// and so consumers' deduplication, stays. One statement in a transaction of its own: all of
  /// it or, when it fails (store_error), none of it. Several are requeued in their old
  /// sequence order, whatever the order asked. A batch still open on this reader is
  /// rolled back first, as fetch does (settling it then throws outbox_claim_lost), so that the
  /// requeue never rides on the batch's transaction. A sequence asked twice throws
  /// std::invalid_argument, writing nothing; an empty span answers an empty report without
  /// connecting.
  outbox_requeue_report requeue(std::span<const std::int64_t> sequences,
                                std::chrono::system_clock::time_point now) {
    namespace pg = detail::postgres;
    detail::check_requeue_sequences(sequences, "idem::postgres_outbox::reader::requeue: ");
    outbox_requeue_report report;
    if (sequences.empty()) return report;
    session_->release_batch();
    connected();
    pg::binary_array wanted(pg::int8_oid);
    for (const std::int64_t sequence : sequences)
      wanted.add(sequence);
    const std::string array = wanted.bytes();
    pg::parameters values;
    values.bytes(array);
    values.int8(pg::outbox_nanoseconds(now));
    static constexpr std::array<Oid, 2> types{pg::int8_array_oid, pg::int8_oid};
    const pg::result_ptr result =
        run(pg::outbox_requeue_sql(names_), values, types.data(), "requeue");
    static constexpr std::array<outbox_requeue_status, 3> statuses{
        outbox_requeue_status::requeued, outbox_requeue_status::no_such_dead_letter,
        outbox_requeue_status::id_already_in_outbox};
    report.reserve(sequences.size());
    for (int row = 0; row < PQntuples(result.get()); ++row) {
      report.push_back({pg::get_int(result.get(), row, 0),
                        statuses.at(static_cast<std::size_t>(pg::get_int(result.get(), row, 1)))});
    }
    return report;
  }

 private:
  static constexpr std::size_t max_limit = std::numeric_limits<std::int64_t>::max();

  // The connection, opened (and set up) when there is none.
  PGconn* connected() {
    namespace pg = detail::postgres;
    if (session_->connection && PQstatus(session_->connection.get()) == CONNECTION_OK) {
      return session_->connection.get();
    }
    session_->drop_connection();
    // libpq counts whole seconds (0: wait forever): a part of one rounds up, never down to 0.
    const std::string timeout =
        std::to_string(std::chrono::ceil<std::chrono::seconds>(config_.connect_timeout).count());
    const std::array<const char*, 4> keywords{"connect_timeout", "fallback_application_name",
                                              "dbname", nullptr};
    const std::array<const char*, 4> values{timeout.c_str(), "idem outbox relay",
                                            config_.conninfo.c_str(), nullptr};
    pg::connection_ptr connection{PQconnectdbParams(keywords.data(), values.data(), 1)};
    if (!connection || PQstatus(connection.get()) != CONNECTION_OK) {
      throw store_error(store_failure::unavailable,
                        "idem::postgres_outbox::reader: cannot connect to PostgreSQL: " +
                            (connection ? pg::describe(connection.get(), nullptr)
                                        : std::string("out of memory")));
    }
    PQsetNoticeProcessor(
        connection.get(), [](void*, const char*) {}, nullptr);
    const std::string settings =
        "SET default_transaction_isolation = 'read committed'; SET statement_timeout = " +
        std::to_string(config_.statement_timeout.count()) +
        "; SET idle_in_transaction_session_timeout = " +
        std::to_string(config_.idle_in_transaction_timeout.count());
    pg::exec_or_throw(connection.get(), settings.c_str(), "configuring the relay's session");
    pg::migrate(connection.get(), names_, config_.table);
    if (config_.listen) {
      pg::exec_or_throw(connection.get(), pg::outbox_listen_sql(config_.table).c_str(),
                        "listening for the outbox's writers");
    }
    prepare(connection.get(), fetch_statement, fetch_sql_, fetch_types);
    prepare(connection.get(), settle_statement, settle_sql_, settle_types);
    session_->connection = std::move(connection);
    return session_->connection.get();
  }

  // fetch and settle run at every batch: prepared once a connection, so that the server plans
  // them once rather than at every batch (unprepared, the settle's plan alone took about 0.4 ms,
  // an eighth of a relay's batch of 64: docs/performance.md, "The outbox").
  static constexpr const char* fetch_statement = "idem_outbox_fetch";
  static constexpr const char* settle_statement = "idem_outbox_settle";
  static constexpr std::array<Oid, 2> fetch_types{detail::postgres::int8_oid,
                                                  detail::postgres::int8_oid};
  static constexpr std::array<Oid, 5> settle_types{
      detail::postgres::int8_array_oid, detail::postgres::int8_array_oid,
      detail::postgres::text_array_oid, detail::postgres::int8_array_oid,
      detail::postgres::int8_oid};

  static void prepare(PGconn* connection, const char* name, const std::string& sql,
                      std::span<const Oid> types) {
    namespace pg = detail::postgres;
    const pg::result_ptr result{
        PQprepare(connection, name, sql.c_str(), static_cast<int>(types.size()), types.data())};
    if (!result || PQresultStatus(result.get()) != PGRES_COMMAND_OK) {
      throw store_error(store_failure::unavailable,
                        std::string("idem::postgres_outbox::reader: preparing ") + name + ": " +
                            pg::describe(connection, result.get()));
    }
  }

  std::string purge_sql() const { return detail::postgres::outbox_purge_sql(names_); }

  // A failed statement: the batch's transaction is over either way; the connection is dropped
  // when it is the connection that failed.
  [[noreturn]] void fail(const PGresult* result, const char* what) {
    namespace pg = detail::postgres;
    PGconn* connection = session_->connection.get();
    const pg::failure_kind kind = pg::classify(connection, result);
    const std::string message = std::string("idem::postgres_outbox::reader: ") + what + ": " +
                                pg::describe(connection, result);
    if (kind == pg::failure_kind::connection) {
      session_->drop_connection();
    } else {
      session_->release_batch();
    }
    throw store_error(
        kind == pg::failure_kind::full ? store_failure::full : store_failure::unavailable, message);
  }

  detail::postgres::result_ptr run(const std::string& sql,
                                   const detail::postgres::parameters& values, const Oid* types,
                                   const char* what) {
    detail::postgres::result_ptr result{PQexecParams(
        session_->connection.get(), sql.c_str(), values.count(), types, values.values(),
        values.lengths(), detail::postgres::parameters::formats(), 1)};
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) fail(result.get(), what);
    return result;
  }

  detail::postgres::result_ptr run_prepared(const char* statement,
                                            const detail::postgres::parameters& values,
                                            const char* what) {
    detail::postgres::result_ptr result{
        PQexecPrepared(session_->connection.get(), statement, values.count(), values.values(),
                       values.lengths(), detail::postgres::parameters::formats(), 1)};
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) fail(result.get(), what);
    return result;
  }

  void run_text(const char* sql, const char* what) {
    const detail::postgres::result_ptr result{PQexec(session_->connection.get(), sql)};
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) fail(result.get(), what);
  }

  // The batch's settlements (and its broken rows, buried) in one statement, then COMMIT; the
  // batch is closed whatever happens.
  void write_settlements(batch& claimed, std::span<const outbox_settlement> settlements,
                         std::chrono::system_clock::time_point now) {
    namespace pg = detail::postgres;
    claimed.open_ = false;
    pg::binary_array sequences(pg::int8_oid);
    pg::binary_array kinds(pg::int8_oid);
    pg::binary_array errors(pg::text_oid);
    pg::binary_array next_attempts(pg::int8_oid);
    std::array<std::size_t, 3> asked{};
    const auto add = [&](std::int64_t sequence, std::int64_t kind, std::string_view error,
                         std::chrono::system_clock::time_point next) {
      sequences.add(sequence);
      kinds.add(kind);
      errors.add(error);
      next_attempts.add(pg::outbox_nanoseconds(next));
      ++asked[static_cast<std::size_t>(kind)];
    };
    for (std::size_t i = 0; i < settlements.size(); ++i) {
      const outbox_settlement& settlement = settlements[i];
      const std::int64_t sequence = claimed.entries_[i].sequence;
      switch (settlement.what) {
        case outbox_settlement::kind::published:
          add(sequence, 0, {}, {});
          break;
        case outbox_settlement::kind::retry:
          add(sequence, 1, pg::storable_error(settlement.error), settlement.next_attempt_at);
          break;
        case outbox_settlement::kind::dead:
          add(sequence, 2, pg::storable_error(settlement.error), {});
          break;
        case outbox_settlement::kind::untouched:
          break;
      }
    }
    for (const batch::broken_row& broken : claimed.broken_) {
      add(broken.sequence, 2,
          "idem::postgres_outbox::reader: the headers column is not "
          "netstrings: " +
              broken.reason,
          {});
    }
    if (sequences.size() > 0) {
      const std::array<std::string, 4> arrays{sequences.bytes(), kinds.bytes(), errors.bytes(),
                                              next_attempts.bytes()};
      pg::parameters values;
      for (const std::string& array : arrays)
        values.bytes(array);
      values.int8(pg::outbox_nanoseconds(now));
      const pg::result_ptr result = run_prepared(settle_statement, values, "settle");
      for (int column = 0; column < 3; ++column) {
        if (static_cast<std::size_t>(pg::get_int(result.get(), 0, column)) !=
            asked[static_cast<std::size_t>(column)]) {
          session_->release_batch();
          throw outbox_claim_lost(
              "idem::postgres_outbox::reader::settle: rows of the batch changed behind its "
              "lock (removed or published by hand): nothing was written");
        }
      }
    }
    run_text("COMMIT", "settle: commit");
    session_->batch_open = false;
    ++session_->generation;
  }

  options config_;
  detail::postgres::quoted_names names_;
  std::string fetch_sql_;
  std::string settle_sql_;
  std::shared_ptr<detail::postgres::outbox_session> session_;
};

static_assert(Outbox<reader>, "idem::postgres_outbox::reader must satisfy idem::Outbox.");

}  // namespace idem::postgres_outbox

#endif  // IDEM_STORE_POSTGRES_OUTBOX_READER_HPP
