// The servers' side of the processor's webhooks (webhook_sender.hpp): POST /v1/webhooks/processor,
// received with idem's webhook receiver (idem/http/webhook.hpp) through an inbox on a SQLite
// file both replicas share (--webhook-db), each event's signature checked under
// --webhook-secret-file and its effect run once per event id, however often and to whichever
// replica it comes.
//
// The effect is the charge's state as the provider tells it (`provider_status`, one row a
// charge), applied through idem::sqlite_version_gate: a `charge.refunded` (version 2) that
// arrives before its charge's `charge.succeeded` (version 1) is kept, and the older event,
// answered 200 so that the sender stops, changes nothing. Each applied event also leaves a row
// in `provider_events`, in the gate's transaction: what payments_chaos --mode check-webhooks
// counts (one row per event at most, every charge in the provider's final state).
//
// --crash-in-webhook P aborts the server with probability P while it handles an event: half the
// time inside the gate's transaction (nothing of it commits; the claim waits out its lease and
// the sender's retry runs it), half after the gate committed and before the inbox recorded the
// event (the retry runs the handler again, and the gate finds the version applied).
#pragma once

#include "common.hpp"
#include "webhook_sender.hpp"

#include <idem/http/webhook.hpp>
#include <idem/policies.hpp>
#include <idem/store/sqlite.hpp>
#include <idem/store/sqlite/version_gate.hpp>

#include <sqlite3.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace payments {

struct webhook_policies : idem::default_policies {
  using store = idem::sqlite_store;
};

/// The processor as a webhook sender: its events' ids at /id, signed with `secret`.
inline idem::http::webhook_receiver processor_webhooks(const std::string& secret) {
  idem::http::webhook_sender processor;
  processor.name = "processor";
  processor.secrets = {secret};
  processor.event_id_pointer = "/id";
  return idem::http::webhook_receiver{std::move(processor)};
}

/// Each charge's state as the processor's webhooks tell it, in the file at `path`.
class provider_status {
 public:
  provider_status(const std::string& path, double crash_rate)
      : store_(make_tables(path)), gate_(store_), crash_rate_(crash_rate) {}

  /// Applies one event (its body as webhook_body writes it) through the version gate.
  void apply(const idem::http::webhook_event& event) {
    const auto body = nlohmann::json::parse(event.body);
    const std::string type = body.at("type").get<std::string>();
    const auto& data = body.at("data");
    const std::string charge_id = data.at("charge_id").get<std::string>();
    const std::int64_t version = data.at("version").get<std::int64_t>();
    const std::string status = type == charge_refunded ? "refunded" : "succeeded";
    gate_.apply("charges", charge_id, version, [&](idem::sqlite_store::transaction& t) {
      t.exec(
          "INSERT INTO provider_events (event_id, charge_id, type, version) VALUES (?1, ?2, "
          "?3, ?4)",
          event.id, charge_id, type, version);
      t.exec(
          "INSERT INTO provider_status (charge_id, status, version) VALUES (?1, ?2, ?3) ON "
          "CONFLICT (charge_id) DO UPDATE SET status = excluded.status, version = "
          "excluded.version",
          charge_id, status, version);
      if (chance(crash_rate_ / 2)) std::abort();  // before the commit
    });
    if (chance(crash_rate_ / 2)) std::abort();  // the gate committed; the inbox has not recorded
  }

  static constexpr const char* tables_sql =
      "PRAGMA journal_mode = WAL;"
      "CREATE TABLE IF NOT EXISTS provider_events (event_id TEXT NOT NULL, charge_id TEXT NOT "
      "NULL, type TEXT NOT NULL, version INTEGER NOT NULL);"
      "CREATE TABLE IF NOT EXISTS provider_status (charge_id TEXT PRIMARY KEY, status TEXT NOT "
      "NULL, version INTEGER NOT NULL);";

 private:
  static std::string make_tables(const std::string& path) {
    sqlite3* db = nullptr;
    const int opened = sqlite3_open(path.c_str(), &db);
    sqlite3_busy_timeout(db, 10000);
    char* error = nullptr;
    const int rc =
        opened != SQLITE_OK ? opened : sqlite3_exec(db, tables_sql, nullptr, nullptr, &error);
    const std::string reason = error != nullptr ? error : (db ? sqlite3_errmsg(db) : "no memory");
    sqlite3_free(error);
    sqlite3_close(db);
    if (rc != SQLITE_OK) throw std::runtime_error("cannot make the webhook tables: " + reason);
    return path;
  }

  idem::sqlite_store store_;
  idem::sqlite_version_gate gate_;
  double crash_rate_;
};

}  // namespace payments
