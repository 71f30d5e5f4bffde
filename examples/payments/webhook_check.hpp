// payments_chaos --mode check-webhooks: the processor's webhooks (webhook_sender.hpp), received
// by the servers (webhook_receiver.hpp), held against the processor's ledger. Once the processor
// says none is pending (waited for at most --wait-s seconds: it retries until a server answers
// 2xx), it reports what was sent, delivered and suppressed as duplicate, and checks, in the
// servers' --webhook-db:
//
//   * no event applied twice: at most one row of provider_events per event id, whatever the
//     duplicate deliveries, the concurrent ones and the crashes in the middle of one;
//   * none missing: every charge of the ledger has a provider status;
//   * every charge in the processor's final state (refunded or succeeded), events out of order
//     included: an older event delivered after a newer one is skipped, not applied.
#pragma once

#include "common.hpp"

#include <httplib.h>
#include <sqlite3.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

namespace payments {

namespace detail {

// Every row `sql` answers, as its first two text columns.
inline std::multimap<std::string, std::string> read_pairs(const std::string& path,
                                                          const char* sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    const std::string why = db ? sqlite3_errmsg(db) : "no memory";
    sqlite3_close(db);
    throw std::runtime_error("cannot open " + path + ": " + why);
  }
  sqlite3_busy_timeout(db, 10000);
  sqlite3_stmt* statement = nullptr;
  std::multimap<std::string, std::string> rows;
  if (sqlite3_prepare_v2(db, sql, -1, &statement, nullptr) != SQLITE_OK) {
    const std::string why = sqlite3_errmsg(db);
    sqlite3_close(db);
    throw std::runtime_error("cannot read " + path + ": " + why);
  }
  while (sqlite3_step(statement) == SQLITE_ROW) {
    rows.emplace(reinterpret_cast<const char*>(sqlite3_column_text(statement, 0)),
                 reinterpret_cast<const char*>(sqlite3_column_text(statement, 1)));
  }
  sqlite3_finalize(statement);
  sqlite3_close(db);
  return rows;
}

inline nlohmann::json get_json(const endpoint& where, const char* path) {
  httplib::Client client(where.host, where.port);
  client.set_read_timeout(std::chrono::seconds{30});
  const auto res = client.Get(path);
  if (!res || res->status != 200) {
    throw std::runtime_error("cannot GET " + where.url() + path + ": " +
                             (res ? std::to_string(res->status) : httplib::to_string(res.error())));
  }
  return nlohmann::json::parse(res->body);
}

}  // namespace detail

/// Prints the report; 0 when every event was applied at most once and every charge is in its
/// final state, 1 otherwise.
inline int check_webhooks(const endpoint& processor, const std::string& db, int wait_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{wait_s};
  nlohmann::json sent = detail::get_json(processor, "/v1/webhooks");
  while (sent.at("pending").get<long long>() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds{200});
    sent = detail::get_json(processor, "/v1/webhooks");
  }
  std::map<std::string, std::string> final_state;  // charge id -> the processor's state
  long long refunded = 0;
  for (const auto& charge : detail::get_json(processor, "/v1/charges")) {
    const std::string state = charge.at("status").get<std::string>();
    final_state[charge.at("charge_id").get<std::string>()] = state;
    refunded += state == "refunded" ? 1 : 0;
  }
  std::map<std::string, int> applied;  // event id -> rows
  for (const auto& [event, charge] :
       detail::read_pairs(db, "SELECT event_id, charge_id FROM provider_events")) {
    ++applied[event];
  }
  const auto status = detail::read_pairs(db, "SELECT charge_id, status FROM provider_status");
  long long twice = 0, missing = 0, wrong = 0;
  for (const auto& [event, rows] : applied)
    twice += rows > 1 ? 1 : 0;
  for (const auto& [charge, state] : final_state) {
    const auto found = status.find(charge);
    if (found == status.end()) {
      ++missing;
    } else if (found->second != state) {
      ++wrong;
    }
  }
  const long long events = sent.at("events").get<long long>();
  const long long pending = sent.at("pending").get<long long>();
  const auto count = [&sent](const char* name) {
    return std::to_string(sent.at(name).get<long long>());
  };
  std::printf(
      "webhooks sent        %lld events in %s deliveries, %s of them sent twice on "
      "purpose\n",
      events, count("attempts").c_str(), count("duplicates_sent").c_str());
  std::printf(
      "  failed, retried    %s: %s unanswered (a server down, restarting, or crashed in the "
      "middle of one), %s answered 409 (the event held by another delivery, or by a "
      "crashed one until its lease ended), %s answered 5xx, %s refused (4xx)\n",
      count("failed_attempts").c_str(), count("unreached").c_str(), count("outstanding").c_str(),
      count("server_errors").c_str(), count("refused").c_str());
  std::printf(
      "webhooks delivered   %lld of %lld (%lld still pending); duplicates suppressed: %s "
      "(answered 200 Idempotent-Replayed, the effect not run again)\n",
      events - pending, events, pending, count("duplicate_answers").c_str());
  std::printf(
      "webhook effects      %zu events applied, %lld skipped as older than their charge's "
      "state (delivered out of order), %lld applied twice\n",
      applied.size(), events - static_cast<long long>(applied.size()), twice);
  std::printf(
      "provider status      %zu charges (%lld refunded): %lld missing, %lld in another "
      "state than the processor's\n",
      final_state.size(), refunded, missing, wrong);
  return pending == 0 && twice == 0 && missing == 0 && wrong == 0 ? 0 : 1;
}

}  // namespace payments
