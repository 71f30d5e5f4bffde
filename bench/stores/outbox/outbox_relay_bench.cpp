// The relay's throughput on PostgreSQL into Redis Streams, beside a relay written by hand.
//
//   outbox_relay/idem/batch:N          idem::outbox_relay over idem::postgres_outbox::reader into
//                                      idem::redis_streams::sink, batch_size N: one run_once()
//                                      per iteration
//   outbox_relay/hand_rolled/batch:N   the same work with the same client libraries (libpq,
//                                      hiredis), written plainly: BEGIN; SELECT N due rows in
//                                      sequence order FOR UPDATE SKIP LOCKED; one pipelined XADD
//                                      per row with the sink's six fields; UPDATE ... SET
//                                      published_at WHERE sequence = ANY($array); COMMIT
//
// Both run on one connection to each server, against the same table (the store's migration,
// its indexes), filled the same way: rows of 64-byte payloads with one header, over 1,000
// partition keys, all due. The rows are written before the timed region (and again, after
// TRUNCATE, whenever fewer than a batch remain, with the timer paused), so an iteration is
// exactly one batch relayed and marked. msgs/s is the messages relayed per second of that.
// The hand-written relay keeps no per-key order across retries (the reader's hold-back probe),
// passes the stored headers through without decoding them, and checks nothing but the count of
// rows it marked: what idem does beyond it is what the ratio shows. PostgreSQL rather than SQLite
// because it is where several relays share one outbox (SKIP LOCKED), the production case. Both
// relays' sessions commit without waiting for the WAL flush (idem_bench::relay_conninfo says
// why). docs/performance.md, "The outbox", has the figures and where idem's time goes.
#include <benchmark/benchmark.h>

#include <endian.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <idem/outbox/headers.hpp>
#include <idem/outbox/relay.hpp>
#include <idem/redis_streams/sink.hpp>
#include <idem/store/postgres/outbox_reader.hpp>

#include "outbox_bench_servers.hpp"

namespace {

using result_ptr = std::unique_ptr<PGresult, decltype(&PQclear)>;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Writes the rows the relays read, and clears what they leave behind, outside the timed region.
class outbox_filler {
 public:
  // Enough rows for many small batches and for 40 of the largest (512) between refills.
  static constexpr std::size_t rows_per_fill = 20480;

  outbox_filler(const idem_bench::outbox_table& table, const idem::redis_streams::server& redis,
                std::string stream)
      : table_(table), redis_(idem_bench::redis_connect(redis)), stream_(std::move(stream)) {}

  // Empties the outbox and the stream, writes rows_per_fill due rows and answers how many.
  std::size_t refill() {
    const idem_bench::pg_connection& admin = table_.admin();
    admin.exec("TRUNCATE " + table_.outbox());
    const std::string fill = std::to_string(++fills_);
    const std::string payload(64, 'p');
    const std::string headers = idem::encode_outbox_headers(
        std::vector<idem::outbox_header>{{"type", "payment.succeeded"}});
    const std::string now = std::to_string(now_ns());
    const std::string count = std::to_string(rows_per_fill);
    const std::string sql =
        "INSERT INTO " + table_.outbox() +
        " (id, topic, partition_key, payload, headers, created_at, next_attempt_at) SELECT "
        "'bench-' || $1 || '-' || g, 'payments', convert_to('acct-' || (g % 1000), 'UTF8'), $2, "
        "$3, $4::int8, $4::int8 FROM generate_series(1, $5::int8) AS g";
    const std::array<const char*, 5> values{fill.c_str(), payload.data(), headers.data(),
                                            now.c_str(), count.c_str()};
    const std::array<int, 5> lengths{0, static_cast<int>(payload.size()),
                                     static_cast<int>(headers.size()), 0, 0};
    const std::array<int, 5> formats{0, 1, 1, 0, 0};
    const result_ptr result(PQexecParams(admin.get(), sql.c_str(), 5, nullptr, values.data(),
                                         lengths.data(), formats.data(), 0),
                            &PQclear);
    if (PQresultStatus(result.get()) != PGRES_COMMAND_OK) {
      throw std::runtime_error("filling the outbox: " + std::string(PQerrorMessage(admin.get())));
    }
    admin.exec("ANALYZE " + table_.outbox());
    idem_bench::redis_do(redis_.get(), {"DEL", stream_});
    return rows_per_fill;
  }

  ~outbox_filler() {
    try {
      idem_bench::redis_do(redis_.get(), {"DEL", stream_});
    } catch (...) {  // NOLINT(bugprone-empty-catch): the server is stopped after the run anyway
    }
  }
  outbox_filler(const outbox_filler&) = delete;
  outbox_filler& operator=(const outbox_filler&) = delete;

 private:
  const idem_bench::outbox_table& table_;
  std::unique_ptr<redisContext, decltype(&redisFree)> redis_;
  std::string stream_;
  std::size_t fills_ = 0;
};

// The relay as one would write it by hand: see the top of this file.
class hand_rolled_relay {
 public:
  hand_rolled_relay(const std::string& conninfo, const std::string& outbox,
                    const idem::redis_streams::server& redis, std::string stream_prefix)
      : postgres_(conninfo),
        redis_(idem_bench::redis_connect(redis)),
        prefix_(std::move(stream_prefix)),
        select_("SELECT sequence, id, topic, partition_key, created_at, headers, payload FROM " +
                outbox +
                " WHERE published_at IS NULL AND next_attempt_at <= $1::int8 ORDER BY sequence "
                "LIMIT $2::int8 FOR UPDATE SKIP LOCKED"),
        mark_("UPDATE " + outbox +
              " SET published_at = $1::int8 WHERE sequence = ANY($2::int8[]) AND published_at IS "
              "NULL") {}

  // One batch: answers how many messages it published.
  std::size_t run_once(std::size_t limit) {
    postgres_.exec("BEGIN");
    const std::string now = std::to_string(now_ns());
    const std::string count = std::to_string(limit);
    const std::array<const char*, 2> select_values{now.c_str(), count.c_str()};
    const result_ptr rows(PQexecParams(postgres_.get(), select_.c_str(), 2, nullptr,
                                       select_values.data(), nullptr, nullptr, 1),
                          &PQclear);
    if (PQresultStatus(rows.get()) != PGRES_TUPLES_OK) fail("select");
    const int n = PQntuples(rows.get());
    std::string sequences = "{";
    for (int row = 0; row < n; ++row) {
      const std::string sequence = std::to_string(int8_at(rows.get(), row, 0));
      const std::string created_at = std::to_string(int8_at(rows.get(), row, 4));
      const std::string stream = prefix_ + std::string(text_at(rows.get(), row, 2));
      std::array<const char*, 15> argv{"XADD",
                                       stream.c_str(),
                                       "*",
                                       "id",
                                       text_at(rows.get(), row, 1),
                                       "sequence",
                                       sequence.c_str(),
                                       "partition_key",
                                       text_at(rows.get(), row, 3),
                                       "created_at",
                                       created_at.c_str(),
                                       "headers",
                                       text_at(rows.get(), row, 5),
                                       "payload",
                                       text_at(rows.get(), row, 6)};
      const std::array<std::size_t, 15> lengths{4,
                                                stream.size(),
                                                1,
                                                2,
                                                length_at(rows.get(), row, 1),
                                                8,
                                                sequence.size(),
                                                13,
                                                length_at(rows.get(), row, 3),
                                                10,
                                                created_at.size(),
                                                7,
                                                length_at(rows.get(), row, 5),
                                                7,
                                                length_at(rows.get(), row, 6)};
      if (redisAppendCommandArgv(redis_.get(), 15, argv.data(), lengths.data()) != REDIS_OK) {
        throw std::runtime_error("XADD could not be queued");
      }
      if (row > 0) sequences += ',';
      sequences += sequence;
    }
    sequences += '}';
    for (int row = 0; row < n; ++row) {
      void* raw = nullptr;
      if (redisGetReply(redis_.get(), &raw) != REDIS_OK) throw std::runtime_error("XADD: no reply");
      const std::unique_ptr<redisReply, decltype(&freeReplyObject)> reply(
          static_cast<redisReply*>(raw), &freeReplyObject);
      if (reply->type != REDIS_REPLY_STRING) {
        throw std::runtime_error("XADD refused: " + std::string(reply->str ? reply->str : ""));
      }
    }
    const std::string published_at = std::to_string(now_ns());
    const std::array<const char*, 2> mark_values{published_at.c_str(), sequences.c_str()};
    const result_ptr marked(PQexecParams(postgres_.get(), mark_.c_str(), 2, nullptr,
                                         mark_values.data(), nullptr, nullptr, 0),
                            &PQclear);
    if (PQresultStatus(marked.get()) != PGRES_COMMAND_OK) fail("mark");
    if (std::to_string(n) != PQcmdTuples(marked.get())) {
      throw std::runtime_error("marked " + std::string(PQcmdTuples(marked.get())) + " of " +
                               std::to_string(n) + " rows");
    }
    postgres_.exec("COMMIT");
    return static_cast<std::size_t>(n);
  }

 private:
  static const char* text_at(const PGresult* rows, int row, int column) {
    return PQgetvalue(rows, row, column);
  }
  static std::size_t length_at(const PGresult* rows, int row, int column) {
    return static_cast<std::size_t>(PQgetlength(rows, row, column));
  }
  static std::int64_t int8_at(const PGresult* rows, int row, int column) {
    std::uint64_t big_endian = 0;
    std::memcpy(&big_endian, PQgetvalue(rows, row, column), sizeof big_endian);
    return static_cast<std::int64_t>(be64toh(big_endian));
  }
  [[noreturn]] void fail(const char* what) {
    const std::string why = PQerrorMessage(postgres_.get());
    postgres_.exec("ROLLBACK");
    throw std::runtime_error(std::string(what) + ": " + why);
  }

  idem_bench::pg_connection postgres_;
  std::unique_ptr<redisContext, decltype(&redisFree)> redis_;
  std::string prefix_;
  std::string select_;
  std::string mark_;
};

enum class relay_side { idem, hand_rolled };

// One batch of either side, kept out of line so that a profiler can count a pass alone
// (valgrind --tool=callgrind --toggle-collect='*relay_pass*').
template <class Relay>
[[gnu::noinline]] std::size_t idem_relay_pass(Relay& relay) {
  return relay.run_once().published;
}
[[gnu::noinline]] std::size_t hand_rolled_relay_pass(hand_rolled_relay& relay, std::size_t batch) {
  return relay.run_once(batch);
}

template <relay_side Side>
void outbox_relay(benchmark::State& state) {
  const auto servers = idem_bench::outbox_servers::from_environment();
  if (!servers.missing.empty()) {
    state.SkipWithError(servers.missing.c_str());
    return;
  }
  const auto batch = static_cast<std::size_t>(state.range(0));
  // Without it both sides wait for the disk at every batch, and the ratio says little.
  const std::string conninfo = idem_bench::relay_conninfo(servers.conninfo);
  try {
    idem_bench::outbox_table table(conninfo, "bench_relay");
    const std::string prefix = "bench:relay:" + table.name() + ":";
    outbox_filler filler(table, servers.redis, prefix + "payments");
    std::size_t left = filler.refill();

    idem::postgres_outbox::reader reader{
        {.conninfo = conninfo, .table = table.name(), .listen = false}};
    idem::redis_streams::sink sink{{.server = servers.redis, .stream_prefix = prefix}};
    idem::outbox_relay relay(reader, sink, {.batch_size = batch});
    hand_rolled_relay by_hand(conninfo, table.outbox(), servers.redis, prefix);

    for (auto _ : state) {
      if (left < batch) {
        state.PauseTiming();
        left = filler.refill();
        state.ResumeTiming();
      }
      std::size_t published = 0;
      if constexpr (Side == relay_side::idem) {
        published = idem_relay_pass(relay);
      } else {
        published = hand_rolled_relay_pass(by_hand, batch);
      }
      if (published != batch) {
        const std::string why =
            "published " + std::to_string(published) + " of a batch of " + std::to_string(batch);
        state.SkipWithError(why.c_str());
        break;
      }
      left -= published;
    }
    state.counters["msgs/s"] = benchmark::Counter(static_cast<double>(state.iterations() * batch),
                                                  benchmark::Counter::kIsRate);
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
  }
}

}  // namespace

BENCHMARK(outbox_relay<relay_side::idem>)
    ->Name("outbox_relay/idem")
    ->ArgName("batch")
    ->Arg(1)
    ->Arg(64)
    ->Arg(512)
    ->UseRealTime();
BENCHMARK(outbox_relay<relay_side::hand_rolled>)
    ->Name("outbox_relay/hand_rolled")
    ->ArgName("batch")
    ->Arg(1)
    ->Arg(64)
    ->Arg(512)
    ->UseRealTime();
