// The processor's webhooks: the card network tells the merchant's servers about its charges, as a
// real provider does, at least once. A charge's events are written in the transaction that
// makes the charge (the processor's own outbox, table `webhooks`), so an event exists exactly
// when its charge does; sender threads deliver them, signed (idem::http::sign_webhook, re-signed
// at every attempt), to the servers in turn, and retry with backoff on anything but a 2xx until
// one answers 2xx. To show the receiver's side at work it also:
//
//   * refunds a share of the charges (--refund-rate): `charge.refunded`, version 2, beside the
//     charge's `charge.succeeded`, version 1, so that the order of the two matters;
//   * holds back half of those charges' `charge.succeeded` for a moment, so that their refund
//     is delivered first (out of order);
//   * delivers a share of the events a second time on purpose once they landed
//     (--webhook-duplicate-rate), to the other server;
//   * delivers while the merchant's own client may still be retrying the payment: an event is
//     written when the charge commits, before the server that asked for it has answered.
//
// GET /v1/webhooks answers the counts: events, delivered, pending, attempts, failed attempts (and
// why they failed), duplicates sent on purpose, and answers marked Idempotent-Replayed
// (duplicates the receiver suppressed).
#pragma once

#include "common.hpp"

#include <idem/http/webhook.hpp>
#include <idem/store/sqlite.hpp>

#include <httplib.h>
#include <sqlite3.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace payments {

inline constexpr std::string_view charge_succeeded = "charge.succeeded";
inline constexpr std::string_view charge_refunded = "charge.refunded";

/// The path the servers receive the processor's webhooks on.
inline constexpr std::string_view processor_webhook_path = "/v1/webhooks/processor";

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// The body of an event about `charge_id`.
inline std::string webhook_body(const std::string& event_id, std::string_view type,
                                const std::string& charge_id, long long amount, int version) {
  const nlohmann::ordered_json body{
      {"id", event_id},
      {"type", type},
      {"data", {{"charge_id", charge_id}, {"amount", amount}, {"version", version}}}};
  return body.dump();
}

struct webhook_settings {
  std::string targets_file;  // the servers' base URLs, one a line; read until it has some
  std::string secret;
  double refund_rate = 0.2;
  double duplicate_rate = 0.1;
  std::size_t threads = 4;
};

/// Writes a charge's events in the charge's transaction (`Transaction` is sqlite_store's).
template <class Transaction>
void write_charge_events(Transaction& tx, const std::string& charge_id, long long amount,
                         double refund_rate) {
  const std::int64_t now = now_ns();
  const bool refunded = chance(refund_rate);
  // Half of the refunded charges have their success held back, so that the refund goes first.
  const std::int64_t held = refunded && chance(0.5) ? 400'000'000 : 0;
  const std::string succeeded_id = "evt_" + charge_id.substr(3) + "_s";
  tx.exec(
      "INSERT INTO webhooks (event_id, charge_id, type, body, not_before_ns) VALUES (?, ?, ?, "
      "?, ?)",
      succeeded_id, charge_id, std::string(charge_succeeded),
      webhook_body(succeeded_id, charge_succeeded, charge_id, amount, 1), now + held);
  if (refunded) {
    const std::string refunded_id = "evt_" + charge_id.substr(3) + "_r";
    tx.exec(
        "INSERT INTO webhooks (event_id, charge_id, type, body, not_before_ns) VALUES (?, ?, "
        "?, ?, ?)",
        refunded_id, charge_id, std::string(charge_refunded),
        webhook_body(refunded_id, charge_refunded, charge_id, amount, 2), now);
  }
}

inline constexpr const char* webhooks_table_sql =
    "CREATE TABLE IF NOT EXISTS webhooks ("
    " event_id TEXT PRIMARY KEY,"
    " charge_id TEXT NOT NULL,"
    " type TEXT NOT NULL,"
    " body TEXT NOT NULL,"
    " not_before_ns INTEGER NOT NULL,"
    " delivered INTEGER NOT NULL DEFAULT 0,"
    " attempts INTEGER NOT NULL DEFAULT 0)";

/// Delivers the events of the `webhooks` table in `path` until it is destroyed.
class webhook_sender {
 public:
  webhook_sender(std::string path, webhook_settings settings)
      : path_(std::move(path)), settings_(std::move(settings)) {
    if (sqlite3_open(path_.c_str(), &db_) != SQLITE_OK) {
      throw std::runtime_error("cannot open " + path_ + " for the webhooks");
    }
    sqlite3_busy_timeout(db_, 10000);
    for (std::size_t i = 0; i < settings_.threads; ++i)
      threads_.emplace_back([this] { run(); });
  }
  ~webhook_sender() {
    stopping_ = true;
    for (auto& thread : threads_)
      thread.join();
    sqlite3_close(db_);
  }
  webhook_sender(const webhook_sender&) = delete;
  webhook_sender& operator=(const webhook_sender&) = delete;

  /// The counts GET /v1/webhooks answers.
  std::string status() {
    long long events = 0, delivered = 0;
    {
      const std::lock_guard lock(mutex_);
      sqlite3_stmt* s = nullptr;
      sqlite3_prepare_v2(db_, "SELECT count(*), coalesce(sum(delivered), 0) FROM webhooks", -1, &s,
                         nullptr);
      if (sqlite3_step(s) == SQLITE_ROW) {
        events = sqlite3_column_int64(s, 0);
        delivered = sqlite3_column_int64(s, 1);
      }
      sqlite3_finalize(s);
    }
    const nlohmann::ordered_json out{{"events", events},
                                     {"delivered", delivered},
                                     {"pending", events - delivered},
                                     {"attempts", attempts_.load()},
                                     {"failed_attempts", failed_.load()},
                                     {"unreached", unreached_.load()},
                                     {"outstanding", outstanding_.load()},
                                     {"server_errors", server_errors_.load()},
                                     {"refused", refused_.load()},
                                     {"duplicates_sent", duplicates_sent_.load()},
                                     {"duplicate_answers", duplicate_answers_.load()}};
    return out.dump();
  }

 private:
  struct due_event {
    std::string id;
    std::string body;
    long long attempts = 0;
  };

  void run() {
    std::size_t turn = 0;
    while (!stopping_) {
      const std::vector<std::string> targets = targets_now();
      std::optional<due_event> event;
      if (!targets.empty()) event = take_due();
      if (!event) {
        std::this_thread::sleep_for(std::chrono::milliseconds{20});
        continue;
      }
      const std::string& target = targets[turn++ % targets.size()];
      const bool landed = deliver(target, *event);
      settle(*event, landed);
      if (landed && chance(settings_.duplicate_rate)) {
        // The same event again, on purpose, to the other server (re-signed: a new timestamp
        // when a second has passed).
        ++duplicates_sent_;
        deliver(targets[turn % targets.size()], *event);
      }
    }
  }

  // One attempt: true for a 2xx.
  bool deliver(const std::string& target, const due_event& event) {
    ++attempts_;
    const auto at =
        std::chrono::time_point_cast<std::chrono::seconds>(std::chrono::system_clock::now());
    httplib::Client client(target);
    client.set_connection_timeout(2, 0);
    client.set_read_timeout(10, 0);
    const httplib::Headers headers{{std::string(idem::http::webhook_signature_field),
                                    idem::http::sign_webhook(settings_.secret, at, event.body)}};
    const auto result =
        client.Post(std::string(processor_webhook_path), headers, event.body, "application/json");
    if (!result || result->status < 200 || result->status >= 300) {
      ++failed_;
      if (!result) {
        ++unreached_;
      } else if (result->status == 409) {
        ++outstanding_;
      } else if (result->status >= 500) {
        ++server_errors_;
      } else {
        ++refused_;
      }
      return false;
    }
    if (result->get_header_value("Idempotent-Replayed") == "true") ++duplicate_answers_;
    return true;
  }

  // The next event due and not in flight, taken.
  std::optional<due_event> take_due() {
    const std::lock_guard lock(mutex_);
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(db_,
                       "SELECT event_id, body, attempts FROM webhooks WHERE delivered = 0 AND "
                       "not_before_ns <= ? ORDER BY not_before_ns LIMIT 64",
                       -1, &s, nullptr);
    sqlite3_bind_int64(s, 1, now_ns());
    std::optional<due_event> found;
    while (!found && sqlite3_step(s) == SQLITE_ROW) {
      std::string id(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
      if (in_flight_.contains(id)) continue;
      found = due_event{id, reinterpret_cast<const char*>(sqlite3_column_text(s, 1)),
                        sqlite3_column_int64(s, 2)};
      in_flight_.insert(std::move(id));
    }
    sqlite3_finalize(s);
    return found;
  }

  // Marks the event delivered, or due again after a backoff of 100 ms doubled each attempt, at
  // most 2 s.
  void settle(const due_event& event, bool landed) {
    const std::lock_guard lock(mutex_);
    sqlite3_stmt* s = nullptr;
    if (landed) {
      sqlite3_prepare_v2(db_,
                         "UPDATE webhooks SET delivered = 1, attempts = attempts + 1 WHERE "
                         "event_id = ?",
                         -1, &s, nullptr);
      sqlite3_bind_text(s, 1, event.id.c_str(), -1, SQLITE_TRANSIENT);
    } else {
      const long long backoff_ms =
          std::min<long long>(2000, 100LL << std::min(event.attempts, 5LL));
      sqlite3_prepare_v2(db_,
                         "UPDATE webhooks SET attempts = attempts + 1, not_before_ns = ? "
                         "WHERE event_id = ?",
                         -1, &s, nullptr);
      sqlite3_bind_int64(s, 1, now_ns() + backoff_ms * 1'000'000);
      sqlite3_bind_text(s, 2, event.id.c_str(), -1, SQLITE_TRANSIENT);
    }
    sqlite3_step(s);
    sqlite3_finalize(s);
    in_flight_.erase(event.id);
  }

  // The servers' URLs, from the targets file once it names some.
  std::vector<std::string> targets_now() {
    {
      const std::lock_guard lock(mutex_);
      if (!targets_.empty()) return targets_;
    }
    std::vector<std::string> read;
    std::ifstream in(settings_.targets_file);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) read.push_back(line);
    const std::lock_guard lock(mutex_);
    if (targets_.empty()) targets_ = read;
    return targets_;
  }

  std::string path_;
  webhook_settings settings_;
  sqlite3* db_ = nullptr;
  std::mutex mutex_;
  std::set<std::string> in_flight_;
  std::vector<std::string> targets_;
  std::atomic<bool> stopping_{false};
  std::atomic<long long> attempts_{0}, failed_{0}, duplicates_sent_{0}, duplicate_answers_{0};
  // Failed attempts by why: no answer (a server down, restarting, or crashed while handling
  // it), 409 (the event's claim held: another delivery runs it, or a crashed one's lease has not
  // ended), 5xx, and any other status (a 4xx: the receiver refused the event itself).
  std::atomic<long long> unreached_{0}, outstanding_{0}, server_errors_{0}, refused_{0};
  std::vector<std::thread> threads_;
};

}  // namespace payments
