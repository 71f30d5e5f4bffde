// idem::sqlite_outbox::reader: the outbox of an SQLite file as a relay sees it (idem::Outbox,
// idem/outbox/source.hpp), plus what an operator needs: the dead letters, listed and requeued.
//
//   idem::sqlite_store store{path};                     // makes or migrates the schema
//   idem::sqlite_outbox::reader outbox(path, {.holder = "relay@host-1"});
//   idem::outbox_relay<idem::sqlite_outbox::reader, my_sink> relay(outbox, sink);
//
// One relay at a time: the file holds one lease (idem_outbox_relay: holder, fence, lease_until).
// fetch takes it, or renews it, in the write transaction that reads the batch; a reader that
// finds it held by another and not expired answers an empty batch and so stays idle. Taking an
// expired lease bumps the fence. settle checks, in its own write transaction, that the fence is
// still this reader's; if it is not (the lease expired and another relay took it), it writes
// nothing and throws idem::outbox_claim_lost: the rows are the new holder's to send.
//
// Order: a row is fetched only when every earlier unpublished row of its partition key is in the
// same batch before it. SQLite has one writer at a time, so sequence order is commit order: the
// order messages of one key were committed in is the order a relay hands them to a sink.
//
// The reader opens its own connection on the file (WAL, the busy timeout), separate from the
// store's pool. One reader is used by one thread at a time. Times are the relay's wall clock,
// compared with the writers' created_at (the system clock): keep the machines' clocks in step.
#ifndef IDEM_STORE_SQLITE_OUTBOX_READER_HPP
#define IDEM_STORE_SQLITE_OUTBOX_READER_HPP

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
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
#include <idem/store/sqlite/detail/connection.hpp>
#include <idem/store/sqlite/detail/record.hpp>
#include <idem/store/sqlite/detail/statements.hpp>
#include <idem/store/sqlite/detail/store.hpp>

namespace idem::detail {

// The reader's SQL. Prepared once per reader (the connection keeps them by their text).
struct sqlite_outbox_sql {
  static constexpr const char* schema_version =
      "SELECT value FROM idem_meta WHERE name = 'schema_version'";
  static constexpr const char* read_lease =
      "SELECT holder, fence, lease_until FROM idem_outbox_relay WHERE id = 1";
  static constexpr const char* write_lease =
      "UPDATE idem_outbox_relay SET holder = ?1, fence = ?2, lease_until = ?3 WHERE id = 1";
  // The hold-back rule in SQL: a due row is left out while an earlier unpublished row of its key
  // is not due. Every earlier row of the key that is due is itself either in the result before
  // this one or held back by a row that holds this one back too, so LIMIT cuts only a suffix and
  // the rule of idem/outbox/source.hpp holds. The outer scan walks idem_outbox_unpublished in
  // sequence order; the inner probe is idem_outbox_by_key's range for the key.
  static constexpr const char* due =
      "SELECT o.sequence, o.id, o.topic, o.partition_key, o.created_at, o.attempts, o.headers, "
      "o.payload FROM idem_outbox AS o WHERE o.published_at IS NULL AND o.next_attempt_at <= ?1 "
      "AND NOT EXISTS (SELECT 1 FROM idem_outbox AS e WHERE e.partition_key = o.partition_key "
      "AND e.published_at IS NULL AND e.sequence < o.sequence AND e.next_attempt_at > ?1) "
      "ORDER BY o.sequence LIMIT ?2";
  static constexpr const char* published =
      "UPDATE idem_outbox SET published_at = ?2, last_error = NULL "
      "WHERE sequence = ?1 AND published_at IS NULL";
  static constexpr const char* retry =
      "UPDATE idem_outbox SET attempts = attempts + 1, next_attempt_at = ?2, last_error = ?3 "
      "WHERE sequence = ?1 AND published_at IS NULL";
  static constexpr const char* bury =
      "INSERT INTO idem_outbox_dead (sequence, id, topic, partition_key, created_at, attempts, "
      "dead_at, reason, headers, payload) SELECT sequence, id, topic, partition_key, created_at, "
      "attempts + 1, ?2, ?3, headers, payload FROM idem_outbox "
      "WHERE sequence = ?1 AND published_at IS NULL";
  static constexpr const char* remove =
      "DELETE FROM idem_outbox WHERE sequence = ?1 AND published_at IS NULL";
  static constexpr const char* purge =
      "DELETE FROM idem_outbox WHERE sequence IN (SELECT sequence FROM idem_outbox "
      "WHERE published_at IS NOT NULL AND published_at < ?1 LIMIT ?2)";
  static constexpr const char* backlog =
      "SELECT count(*), min(created_at) FROM idem_outbox WHERE published_at IS NULL";
  static constexpr const char* data_version = "PRAGMA data_version";
  static constexpr const char* dead_letters =
      "SELECT sequence, id, topic, partition_key, created_at, attempts, headers, payload, "
      "dead_at, reason FROM idem_outbox_dead WHERE sequence > ?1 ORDER BY sequence LIMIT ?2";
  static constexpr const char* dead_id = "SELECT id FROM idem_outbox_dead WHERE sequence = ?1";
  static constexpr const char* queued_id = "SELECT 1 FROM idem_outbox WHERE id = ?1";
  // A requeued message goes to the end of the line with a new sequence and no attempts: it is
  // sent again as if written now, behind what its key committed since (its created_at stays, so
  // the lag shows how old it is).
  static constexpr const char* requeue =
      "INSERT INTO idem_outbox (id, topic, partition_key, created_at, attempts, next_attempt_at, "
      "headers, payload) SELECT id, topic, partition_key, created_at, 0, ?2, headers, payload "
      "FROM idem_outbox_dead WHERE sequence = ?1";
  static constexpr const char* unbury = "DELETE FROM idem_outbox_dead WHERE sequence = ?1";
};

inline void sqlite_bind(sqlite3_stmt* statement, int index, std::int64_t value) {
  sqlite3_bind_int64(statement, index, value);
}

inline void sqlite_bind(sqlite3_stmt* statement, int index, std::string_view text) {
  sqlite3_bind_text64(statement, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
}

}  // namespace idem::detail

namespace idem::sqlite_outbox {

/// The relay lease as the file holds it.
struct lease_state {
  std::string holder{};
  std::int64_t fence = 0;
  std::chrono::system_clock::time_point lease_until{};
  /// Whether the fence is the one this reader took last.
  bool mine = false;
};

/// The outbox of an SQLite file, for a relay (idem::Outbox) and an operator. See the top of
/// this header.
class reader {
 public:
  /// How a reader connects and holds the lease (docs/outbox_relay.md has the table).
  struct options {
    /// How long a statement waits for the database's write lock before failing with
    /// store_error (unavailable).
    std::chrono::milliseconds busy_timeout{5000};
    /// How long a fetch or settle keeps the relay lease. A relay that stops renewing it (dead,
    /// paused, cut off) is replaced by another after this; set it well above a pass's time,
    /// sink included.
    std::chrono::milliseconds lease{30000};
    /// Who holds the lease, for an operator reading idem_outbox_relay (the fence, not this
    /// name, tells readers apart).
    std::string holder = "idem relay";
    /// PRAGMA synchronous on the reader's connection: full (fsync at every commit, a settle
    /// survives power loss) or normal, as sqlite_store::options::synchronous.
    sqlite_store::synchronous_mode synchronous = sqlite_store::synchronous_mode::full;
  };

  /// A fetched batch: the claim of its rows until settled or destroyed.
  class batch {
   public:
    std::span<const outbox_entry> entries() const noexcept { return entries_; }
    /// The lease fence the batch was fetched under (0 for an empty batch fetched while another
    /// reader held the lease).
    std::int64_t fence() const noexcept { return fence_; }

   private:
    friend class reader;
    std::vector<outbox_entry> entries_;
    std::int64_t fence_ = 0;
    const void* owner_ = nullptr;
    bool settled_ = false;
  };

  /// Opens its own connection on `path`, a file an idem::sqlite_store made (or migrated) to this
  /// idem's schema. Throws store_error (unavailable) when the file cannot be opened, or holds no
  /// idem schema or another version of it, saying which; std::invalid_argument for a lease or
  /// busy timeout that is not positive.
  explicit reader(std::string path) : reader(std::move(path), options{}) {}
  explicit reader(std::string path, options opts)
      : settings_(std::make_unique<detail::sqlite_settings>()), options_(std::move(opts)) {
    if (options_.lease.count() <= 0 || options_.busy_timeout.count() < 0) {
      throw std::invalid_argument(
          "idem::sqlite_outbox::reader: the lease must be positive and the busy timeout not "
          "negative");
    }
    settings_->path = std::move(path);
    settings_->synchronous_full = options_.synchronous == sqlite_store::synchronous_mode::full;
    settings_->busy_timeout = options_.busy_timeout;
    connection_ = detail::sqlite_connection::open(*settings_);
    check_schema();
  }

  /// Takes or renews the lease and claims at most `limit` due rows in order (see the top of
  /// this header). Empty when nothing is due, or another reader holds the lease.
  batch fetch(std::size_t limit, std::chrono::system_clock::time_point now) {
    batch fetched;
    fetched.owner_ = this;
    detail::sqlite_write_transaction transaction(*connection_);
    const lease_state lease = read_lease();
    if (my_fence_ != 0 && lease.fence == my_fence_) {
      write_lease(lease.holder, my_fence_, now);
    } else if (lease.lease_until <= now) {
      // Expired (or never taken): a takeover. The new fence is what makes the previous
      // holder's settle fail.
      write_lease(options_.holder, lease.fence + 1, now);
      my_fence_ = lease.fence + 1;
    } else {
      transaction.commit();
      return fetched;
    }
    fetched.fence_ = my_fence_;
    sqlite3_stmt* due = statement(detail::sqlite_outbox_sql::due);
    const detail::sqlite_use use(due);
    detail::sqlite_bind(due, 1, detail::sqlite_nanoseconds(now));
    detail::sqlite_bind(due, 2, static_cast<std::int64_t>(limit));
    std::vector<std::pair<std::int64_t, std::string>> damaged;
    while (connection_->step(due, "fetch outbox rows") == SQLITE_ROW) {
      outbox_entry entry;
      entry.sequence = sqlite3_column_int64(due, 0);
      entry.id = detail::sqlite_column_bytes(due, 1);
      entry.message.topic = detail::sqlite_column_bytes(due, 2);
      entry.message.partition_key = detail::sqlite_column_bytes(due, 3);
      entry.created_at = detail::sqlite_time(sqlite3_column_int64(due, 4));
      entry.attempts = static_cast<std::uint32_t>(sqlite3_column_int64(due, 5));
      try {
        entry.message.headers = decode_outbox_headers(detail::sqlite_column_bytes(due, 6));
      } catch (const std::invalid_argument& error) {
        damaged.emplace_back(entry.sequence, error.what());
        continue;
      }
      entry.message.payload = detail::sqlite_column_bytes(due, 7);
      fetched.entries_.push_back(std::move(entry));
    }
    sqlite3_reset(due);
    // A row no sink could be handed (its headers column written by hand, or damaged) would
    // fail every fetch and stop the relay for good; it goes to the dead letters with the
    // reason instead, and the rows behind it flow.
    for (const auto& [sequence, why] : damaged) {
      run(detail::sqlite_outbox_sql::bury, sequence, detail::sqlite_nanoseconds(now),
          "idem::sqlite_outbox::reader: the row cannot be read: " + why, "dead-letter a row");
      run(detail::sqlite_outbox_sql::remove, sequence, std::nullopt, {}, "dead-letter a row");
    }
    transaction.commit();
    return fetched;
  }

  /// Writes one settlement per entry of `settled` in one write transaction, which also renews
  /// the lease. Throws outbox_claim_lost, writing nothing, when the lease's fence is no longer
  /// the batch's; std::invalid_argument for a batch of another reader or a count of
  /// settlements that is not the batch's; std::logic_error for a batch settled before;
  /// store_error when SQLite fails (nothing written).
  void settle(batch& settled, std::span<const outbox_settlement> settlements,
              std::chrono::system_clock::time_point now) {
    constexpr const char* who = "idem::sqlite_outbox::reader::settle: ";
    if (settled.owner_ != this) {
      throw std::invalid_argument(std::string(who) + "the batch was fetched by another reader");
    }
    if (settled.settled_) throw std::logic_error(std::string(who) + "the batch was settled before");
    if (settlements.size() != settled.entries_.size()) {
      throw std::invalid_argument(std::string(who) + std::to_string(settlements.size()) +
                                  " settlements for a batch of " +
                                  std::to_string(settled.entries_.size()));
    }
    if (settled.entries_.empty()) {
      settled.settled_ = true;
      return;
    }
    detail::sqlite_write_transaction transaction(*connection_);
    const lease_state lease = read_lease();
    if (lease.fence != settled.fence_) {
      settled.settled_ = true;
      throw outbox_claim_lost(std::string(who) + "the relay lease of '" + settings_->path +
                              "' was taken over (its fence is " + std::to_string(lease.fence) +
                              ", the batch's " + std::to_string(settled.fence_) + ", holder '" +
                              lease.holder + "'): nothing was settled");
    }
    write_lease(lease.holder, lease.fence, now);
    const std::int64_t at = detail::sqlite_nanoseconds(now);
    for (std::size_t i = 0; i < settlements.size(); ++i) {
      const outbox_settlement& settlement = settlements[i];
      const std::int64_t sequence = settled.entries_[i].sequence;
      switch (settlement.what) {
        case outbox_settlement::kind::published:
          run(detail::sqlite_outbox_sql::published, sequence, at, {}, "mark a row published");
          break;
        case outbox_settlement::kind::retry:
          run(detail::sqlite_outbox_sql::retry, sequence,
              detail::sqlite_nanoseconds(settlement.next_attempt_at), settlement.error,
              "schedule a retry");
          break;
        case outbox_settlement::kind::dead:
          run(detail::sqlite_outbox_sql::bury, sequence, at, settlement.error, "dead-letter a row");
          run(detail::sqlite_outbox_sql::remove, sequence, std::nullopt, {}, "dead-letter a row");
          break;
        case outbox_settlement::kind::untouched:
          break;
      }
    }
    transaction.commit();
    settled.settled_ = true;
  }

  /// Deletes at most `limit` rows published before `published_before`; answers how many.
  std::size_t purge(std::chrono::system_clock::time_point published_before, std::size_t limit) {
    sqlite3_stmt* purge = statement(detail::sqlite_outbox_sql::purge);
    const detail::sqlite_use use(purge);
    detail::sqlite_bind(purge, 1, detail::sqlite_nanoseconds(published_before));
    detail::sqlite_bind(purge, 2, static_cast<std::int64_t>(limit));
    connection_->step(purge, "purge published rows");
    return static_cast<std::size_t>(sqlite3_changes64(connection_->db()));
  }

  /// What waits: unpublished rows, due or not, and when the oldest was written.
  outbox_backlog backlog(std::chrono::system_clock::time_point /*now*/) {
    sqlite3_stmt* query = statement(detail::sqlite_outbox_sql::backlog);
    const detail::sqlite_use use(query);
    outbox_backlog waiting;
    if (connection_->step(query, "read the backlog") == SQLITE_ROW) {
      waiting.waiting = static_cast<std::size_t>(sqlite3_column_int64(query, 0));
      if (sqlite3_column_type(query, 1) != SQLITE_NULL) {
        waiting.oldest_created_at = detail::sqlite_time(sqlite3_column_int64(query, 1));
      }
    }
    return waiting;
  }

  /// Returns once another connection committed to the file (PRAGMA data_version moved: a
  /// writer's commit, perhaps with new rows), or after `timeout`. SQLite has no notification
  /// across processes, so this polls, every 5 ms: one read of a counter in shared memory.
  void wait_for_rows(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    const std::int64_t seen = data_version();
    while (std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          std::chrono::milliseconds{5}, until - std::chrono::steady_clock::now()));
      if (data_version() != seen) return;
    }
  }

  /// The dead letters after sequence `after`, at most `limit`, in sequence order (oldest
  /// first): page with the last one's sequence.
  std::vector<outbox_dead_letter> dead_letters(std::size_t limit, std::int64_t after = 0) {
    sqlite3_stmt* query = statement(detail::sqlite_outbox_sql::dead_letters);
    const detail::sqlite_use use(query);
    detail::sqlite_bind(query, 1, after);
    detail::sqlite_bind(query, 2, static_cast<std::int64_t>(limit));
    std::vector<outbox_dead_letter> found;
    while (connection_->step(query, "list dead letters") == SQLITE_ROW) {
      outbox_dead_letter letter;
      letter.entry.sequence = sqlite3_column_int64(query, 0);
      letter.entry.id = detail::sqlite_column_bytes(query, 1);
      letter.entry.message.topic = detail::sqlite_column_bytes(query, 2);
      letter.entry.message.partition_key = detail::sqlite_column_bytes(query, 3);
      letter.entry.created_at = detail::sqlite_time(sqlite3_column_int64(query, 4));
      letter.entry.attempts = static_cast<std::uint32_t>(sqlite3_column_int64(query, 5));
      try {
        letter.entry.message.headers = decode_outbox_headers(detail::sqlite_column_bytes(query, 6));
      } catch (const std::invalid_argument&) {
        // Dead because its headers could not be read (the reason says so): listed without them.
      }
      letter.entry.message.payload = detail::sqlite_column_bytes(query, 7);
      letter.dead_at = detail::sqlite_time(sqlite3_column_int64(query, 8));
      letter.reason = detail::sqlite_column_bytes(query, 9);
      found.push_back(std::move(letter));
    }
    return found;
  }

  /// Moves the dead letters with these sequences back into the outbox, due at `now`, and
  /// answers what became of each, in the order asked (idem/outbox/dead_letter.hpp). A requeued
  /// one gets a new sequence and no attempts: it is sent behind what its partition key committed
  /// since it died; its id stays, and so consumers' deduplication. One write transaction for the
  /// whole span: all of it or, when SQLite fails (store_error), none of it. Several are
  /// requeued in their old sequence order, whatever the order asked. It needs no relay
  /// lease and takes none: a relay holding the lease fetches the requeued rows at its next pass.
  /// A sequence asked twice throws std::invalid_argument, writing nothing; an empty span answers
  /// an empty report without touching the file.
  outbox_requeue_report requeue(std::span<const std::int64_t> sequences,
                                std::chrono::system_clock::time_point now) {
    detail::check_requeue_sequences(sequences, "idem::sqlite_outbox::reader::requeue: ");
    outbox_requeue_report report;
    if (sequences.empty()) return report;
    // Requeued in their old sequence order, whatever the order asked: the new sequences keep
    // one key's dead letters in the order they were written.
    std::vector<std::size_t> order(sequences.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t x, std::size_t y) { return sequences[x] < sequences[y]; });
    report.resize(sequences.size());
    detail::sqlite_write_transaction transaction(*connection_);
    for (const std::size_t i : order) {
      report[i] = {sequences[i], requeue_one(sequences[i], now)};
    }
    transaction.commit();
    return report;
  }

  /// The lease as the file holds it now.
  lease_state lease() {
    lease_state state = read_lease();
    state.mine = my_fence_ != 0 && state.fence == my_fence_;
    return state;
  }

  const std::string& path() const noexcept { return settings_->path; }

 private:
  void check_schema() {
    std::string version;
    try {
      version = connection_->text_of(detail::sqlite_outbox_sql::schema_version,
                                     "read the schema version");
    } catch (const store_error&) {
      version.clear();  // no idem_meta: not an idem file (yet)
    }
    const std::string expected = std::to_string(detail::sqlite_schema_version);
    if (version == expected) return;
    const std::string found = version.empty() ? "no idem schema" : "schema version " + version;
    const bool older = version.empty() || std::stoll(version) < detail::sqlite_schema_version;
    throw store_error(store_failure::unavailable,
                      "idem::sqlite_outbox::reader: '" + settings_->path + "' holds " + found +
                          ", not " + expected +
                          (older ? "; open an idem::sqlite_store on it first, which makes or "
                                   "migrates the schema"
                                 : "; it was written by a newer idem: upgrade idem"));
  }

  sqlite3_stmt* statement(const char* sql) { return connection_->handler_statement(sql); }

  // One sequence of requeue, inside its transaction.
  outbox_requeue_status requeue_one(std::int64_t sequence,
                                    std::chrono::system_clock::time_point now) {
    std::string id;
    {
      sqlite3_stmt* query = statement(detail::sqlite_outbox_sql::dead_id);
      const detail::sqlite_use use(query);
      detail::sqlite_bind(query, 1, sequence);
      if (connection_->step(query, "read a dead letter") != SQLITE_ROW) {
        return outbox_requeue_status::no_such_dead_letter;
      }
      id = detail::sqlite_column_bytes(query, 0);
    }
    {
      sqlite3_stmt* query = statement(detail::sqlite_outbox_sql::queued_id);
      const detail::sqlite_use use(query);
      detail::sqlite_bind(query, 1, std::string_view{id});
      if (connection_->step(query, "look for the id in the outbox") == SQLITE_ROW) {
        return outbox_requeue_status::id_already_in_outbox;
      }
    }
    run(detail::sqlite_outbox_sql::requeue, sequence, detail::sqlite_nanoseconds(now), {},
        "requeue a dead letter");
    run(detail::sqlite_outbox_sql::unbury, sequence, std::nullopt, {}, "requeue a dead letter");
    return outbox_requeue_status::requeued;
  }

  lease_state read_lease() {
    sqlite3_stmt* query = statement(detail::sqlite_outbox_sql::read_lease);
    const detail::sqlite_use use(query);
    lease_state state;
    if (connection_->step(query, "read the relay lease") != SQLITE_ROW) {
      throw store_error(store_failure::unavailable,
                        "idem::sqlite_outbox::reader: '" + settings_->path +
                            "' has no relay lease row (idem_outbox_relay was emptied by hand)");
    }
    state.holder = detail::sqlite_column_bytes(query, 0);
    state.fence = sqlite3_column_int64(query, 1);
    state.lease_until = detail::sqlite_time(sqlite3_column_int64(query, 2));
    return state;
  }

  void write_lease(const std::string& holder, std::int64_t fence,
                   std::chrono::system_clock::time_point now) {
    sqlite3_stmt* update = statement(detail::sqlite_outbox_sql::write_lease);
    const detail::sqlite_use use(update);
    detail::sqlite_bind(update, 1, std::string_view{holder});
    detail::sqlite_bind(update, 2, fence);
    detail::sqlite_bind(
        update, 3,
        detail::sqlite_nanoseconds(
            now + std::chrono::duration_cast<std::chrono::system_clock::duration>(options_.lease)));
    connection_->step(update, "write the relay lease");
  }

  // Runs one of the settle statements: ?1 the sequence, ?2 a time, ?3 a text, where given.
  void run(const char* sql, std::int64_t sequence, std::optional<std::int64_t> time,
           std::optional<std::string_view> text, std::string_view what) {
    sqlite3_stmt* update = statement(sql);
    const detail::sqlite_use use(update);
    detail::sqlite_bind(update, 1, sequence);
    if (time) detail::sqlite_bind(update, 2, *time);
    if (text) detail::sqlite_bind(update, 3, *text);
    connection_->step(update, what);
  }

  std::int64_t data_version() {
    sqlite3_stmt* query = statement(detail::sqlite_outbox_sql::data_version);
    const detail::sqlite_use use(query);
    connection_->step(query, "read the data version");
    return sqlite3_column_int64(query, 0);
  }

  std::unique_ptr<detail::sqlite_settings> settings_;
  options options_;
  std::unique_ptr<detail::sqlite_connection> connection_;
  std::int64_t my_fence_ = 0;
};

}  // namespace idem::sqlite_outbox

#endif  // IDEM_STORE_SQLITE_OUTBOX_READER_HPP
