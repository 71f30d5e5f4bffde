// Receiving one webhook on SQLite (issue 52): idem's receiver beside the one an application
// writes by hand.
//
//   webhook_receive/idem/normal:{0,1}           idem::http::receive_webhook: the signature field
//                                                parsed, HMAC-SHA-256 (idem's) checked in constant
//                                                time, the timestamp's tolerance, the event id read
//                                                from the JSON body, then an idem::inbox in
//                                                commit_mode::one_commit whose handler inserts one
//                                                effect row in the transaction that records the
//                                                event: one commit; the answer written.
//   webhook_receive/hand_written/normal:{0,1}   the same by hand: the field split at its commas,
//                                                OpenSSL's HMAC() and CRYPTO_memcmp, the tolerance,
//                                                nlohmann::json for the id, then BEGIN IMMEDIATE,
//                                                INSERT the event id ON CONFLICT DO NOTHING (into a
//                                                table indexed by age, as its purge needs), the
//                                                effect row when it was new, COMMIT (prepared
//                                                statements, one connection); the same answer.
//
// Each iteration is a new event (a body of about 150 bytes), signed before it is received on
// both sides alike (the sender's cost, the same for both). One database file each in the
// temporary directory, WAL, synchronous FULL (normal:0, an fsync a commit: what a receiver that
// must not lose an acknowledged event runs) or NORMAL (normal:1, no fsync: what is left is CPU).
#include <benchmark/benchmark.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sqlite3.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <idem/http/webhook.hpp>
#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>

#include "stores/sqlite/raw_sqlite.hpp"
#include "temporary_directory.hpp"

namespace {

constexpr std::string_view secret = "whsec_4eC39HqLyjWDarjtT1zdp7dc";

std::string event_body(std::int64_t n) {
  return R"({"id":"evt_)" + std::to_string(n) +
         R"(","type":"charge.succeeded","created":1733580000,"data":{"object":{"id":"ch_)" +
         std::to_string(n) + R"(","amount":1000,"currency":"eur","status":"succeeded"}}})";
}

std::chrono::sys_seconds now_seconds() {
  return std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::system_clock::now());
}

constexpr const char* effects_schema =
    "CREATE TABLE IF NOT EXISTS effects (event TEXT NOT NULL, amount INTEGER NOT NULL)";

idem::sqlite_store::synchronous_mode mode_of(const benchmark::State& state) {
  return state.range(0) == 0 ? idem::sqlite_store::synchronous_mode::full
                             : idem::sqlite_store::synchronous_mode::normal;
}

struct one_commit_policies : idem::default_policies {
  using store = idem::sqlite_store;
  static constexpr idem::commit_mode commit = idem::commit_mode::one_commit;
};

/// A request's one signature field, as a binding hands it over.
struct signature_field {
  std::string value;
  std::vector<std::string_view> operator()(std::string_view name) const {
    if (idem::header_name_equals(name, idem::http::webhook_signature_field)) return {value};
    return {};
  }
};

void webhook_receive_idem(benchmark::State& state) {
  idem::testing::temporary_directory directory{"idem-webhook-bench"};
  const std::string path = directory.file("idem.sqlite3");
  idem::sqlite_store::options store_options;
  store_options.path = path;
  store_options.synchronous = mode_of(state);
  store_options.pool_size = 1;
  idem::inbox<one_commit_policies>::options parts;
  parts.store = idem::sqlite_store{store_options};
  idem::inbox<one_commit_policies> events(std::move(parts));
  {
    sqlite3* db = nullptr;
    sqlite3_open(path.c_str(), &db);
    sqlite3_exec(db, effects_schema, nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  idem::http::webhook_sender sender;
  sender.name = "provider";
  sender.secrets = {std::string(secret)};
  const idem::http::webhook_receiver receiver{sender};
  auto handler = [](const idem::http::webhook_event& event, idem::sqlite_store::transaction& t) {
    t.exec("INSERT INTO effects (event, amount) VALUES (?1, ?2)", event.id, 1000);
  };
  std::int64_t n = 0;
  for (auto _ : state) {
    const std::string body = event_body(n++);
    const signature_field field{idem::http::sign_webhook(secret, now_seconds(), body)};
    idem::http::reply answer;
    idem::http::receive_webhook(events, receiver, field, body, handler, answer);
    if (answer.status != 200) {
      state.SkipWithError(
          ("idem's receiver answered " + std::to_string(answer.status) + ": " + answer.body)
              .c_str());
      break;
    }
    benchmark::DoNotOptimize(answer);
  }
}

// The receiver an application writes by hand.
class hand_written_receiver {
 public:
  hand_written_receiver(const std::string& path, bool full) : db_(path) {
    db_.exec("PRAGMA journal_mode = WAL");
    db_.exec(full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL");
    db_.exec(
        "CREATE TABLE IF NOT EXISTS webhook_inbox (sender TEXT NOT NULL, event TEXT NOT NULL, "
        "received_at INTEGER NOT NULL, PRIMARY KEY (sender, event)) WITHOUT ROWID");
    // What its purge of old events needs (idem's records expire and are swept by the same kind
    // of index): without it the table grows for ever, or each purge reads all of it.
    db_.exec("CREATE INDEX IF NOT EXISTS webhook_inbox_by_age ON webhook_inbox (received_at)");
    db_.exec(effects_schema);
    begin_ = db_.prepare("BEGIN IMMEDIATE");
    record_ = db_.prepare(
        "INSERT INTO webhook_inbox (sender, event, received_at) VALUES (?1, ?2, ?3) ON CONFLICT "
        "DO NOTHING");
    effect_ = db_.prepare("INSERT INTO effects (event, amount) VALUES (?1, ?2)");
    commit_ = db_.prepare("COMMIT");
  }

  /// The status and body answered.
  std::pair<int, std::string> receive(std::string_view signature, const std::string& body) {
    // t=<seconds>,v1=<hex>: split at the commas.
    std::int64_t stamp = -1;
    std::string_view tag;
    while (!signature.empty()) {
      const std::size_t comma = signature.find(',');
      const std::string_view part = signature.substr(0, comma);
      signature =
          comma == std::string_view::npos ? std::string_view{} : signature.substr(comma + 1);
      if (part.starts_with("t=")) {
        std::from_chars(part.data() + 2, part.data() + part.size(), stamp);
      } else if (part.starts_with("v1=")) {
        tag = part.substr(3);
      }
    }
    if (stamp < 0 || tag.size() != 64) return {400, "bad signature"};
    const std::string signed_text = std::to_string(stamp) + "." + body;
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_size = 0;
    HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
         reinterpret_cast<const unsigned char*>(signed_text.data()), signed_text.size(), mac,
         &mac_size);
    unsigned char given[32];
    for (std::size_t i = 0; i < 32; ++i) {
      std::from_chars(tag.data() + 2 * i, tag.data() + 2 * i + 2, given[i], 16);
    }
    if (mac_size != 32 || CRYPTO_memcmp(mac, given, 32) != 0) return {400, "bad signature"};
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    if (now - stamp > 300 || stamp - now > 300) return {400, "stale"};
    const std::string id = nlohmann::json::parse(body).at("id").get<std::string>();
    db_.step(begin_);
    sqlite3_bind_text(record_, 1, "provider", -1, SQLITE_STATIC);
    sqlite3_bind_text(record_, 2, id.data(), static_cast<int>(id.size()), SQLITE_STATIC);
    sqlite3_bind_int64(record_, 3, now);
    db_.step(record_);
    const bool fresh = db_.changes() == 1;
    if (fresh) {
      sqlite3_bind_text(effect_, 1, id.data(), static_cast<int>(id.size()), SQLITE_STATIC);
      sqlite3_bind_int64(effect_, 2, 1000);
      db_.step(effect_);
    }
    db_.step(commit_);
    return {200, R"({"event":")" + id +
                     (fresh ? R"(","outcome":"processed"})" : R"(","outcome":"duplicate"})")};
  }

 private:
  idem_bench::raw_sqlite db_;
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* record_ = nullptr;
  sqlite3_stmt* effect_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
};

void webhook_receive_hand_written(benchmark::State& state) {
  idem::testing::temporary_directory directory{"idem-webhook-bench"};
  hand_written_receiver receiver(directory.file("hand.sqlite3"), state.range(0) == 0);
  std::int64_t n = 0;
  for (auto _ : state) {
    const std::string body = event_body(n++);
    const std::string signature = idem::http::sign_webhook(secret, now_seconds(), body);
    const auto answer = receiver.receive(signature, body);
    if (answer.first != 200) {
      state.SkipWithError(("the hand-written receiver answered " + answer.second).c_str());
      break;
    }
    benchmark::DoNotOptimize(answer);
  }
}

}  // namespace

BENCHMARK(webhook_receive_idem)->Name("webhook_receive/idem")->ArgName("normal")->Arg(0)->Arg(1);
BENCHMARK(webhook_receive_hand_written)
    ->Name("webhook_receive/hand_written")
    ->ArgName("normal")
    ->Arg(0)
    ->Arg(1);
