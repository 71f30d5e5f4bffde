// A webhook receiver, as a service runs one: a cpp-httplib server whose POST /webhooks/provider
// is idem::http::webhook_handler over an idem::inbox on SQLite (a file, so that a receiver
// killed and started again finds what it recorded), for webhook_delivery_test.cpp. A charge's
// events ({"id", "type": "charge.succeeded" | "charge.refunded", "data": {"charge", "amount",
// "version"}}) are applied one of two ways:
//
//   --mode=tx    in the inbox's transaction: a row in `effects` for the event and the charge's
//                status, in the same commit as the record of the event (the transactional inbox)
//   --mode=gate  through idem::sqlite_version_gate, keyed by the charge and the event's version:
//                an event overtaken by a newer one of its charge is skipped (a refund delivered
//                before its charge's success ends refunded)
//
// Usage: idem_webhook_receiver --db=FILE --port=N --secret=S --mode=tx|gate [--lease-ms=MS]
//          [--die=in_handler|after_effect|before_answer --victim=EVENT_ID]
// Prints "listening N" once it serves. --die kills the process with SIGKILL when the victim's
// event is in its handler (before the commit), once the gate committed its effect and before
// the inbox recorded the event (--mode=gate), or once its answer is made and before it is sent.
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <idem/http/httplib.hpp>
#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>
#include <idem/store/sqlite/version_gate.hpp>

#include "support/worker_io.hpp"

namespace {

using idem::testing::say;
using idem::testing::worker_arguments;

struct receiver_policies : idem::default_policies {
  using store = idem::sqlite_store;
};

struct charge_event {
  std::string type;
  std::string charge;
  std::int64_t amount = 0;
  std::int64_t version = 0;
};

charge_event parse(std::string_view body) {
  const auto json = nlohmann::json::parse(body);
  const auto& data = json.at("data");
  return {json.at("type").get<std::string>(), data.at("charge").get<std::string>(),
          data.at("amount").get<std::int64_t>(), data.at("version").get<std::int64_t>()};
}

std::string status_of(const std::string& type) {
  return type == "charge.refunded" ? "refunded" : "succeeded";
}

void make_tables(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error("cannot open db");
  char* error = nullptr;
  const int rc = sqlite3_exec(db,
                              "PRAGMA journal_mode=WAL;"
                              "CREATE TABLE IF NOT EXISTS effects (event TEXT, type TEXT, "
                              "charge TEXT, amount INTEGER);"
                              "CREATE TABLE IF NOT EXISTS charges (id TEXT PRIMARY KEY, "
                              "status TEXT, version INTEGER);",
                              nullptr, nullptr, &error);
  const std::string why = error != nullptr ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw std::runtime_error("cannot make the tables: " + why);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const worker_arguments arguments(argc, argv);
    const std::string db = arguments.option("db");
    const std::string mode = arguments.option("mode");
    const std::string die = arguments.option_or("die", "");
    const std::string victim = arguments.option_or("victim", "");
    make_tables(db);

    idem::inbox<receiver_policies>::options options;
    options.store = idem::sqlite_store{db};
    options.lease = std::chrono::milliseconds{arguments.number_or("lease-ms", 1000)};
    idem::inbox<receiver_policies> events(std::move(options));
    idem::sqlite_version_gate gate{events.store()};

    idem::http::webhook_sender provider;
    provider.name = "provider";
    provider.secrets = {arguments.option("secret")};
    const idem::http::webhook_receiver receiver{provider};

    auto maybe_die = [&](std::string_view point, std::string_view id) {
      if (point == die && id == victim) {
        say("dying " + std::string(point));
        ::kill(::getpid(), SIGKILL);
      }
    };

    httplib::Server server;
    idem::http::harden(server);
    if (mode == "tx") {
      server.Post(
          "/webhooks/provider",
          idem::http::webhook_handler(
              events, receiver,
              [&](const idem::http::webhook_event& event, idem::sqlite_store::transaction& t) {
                const charge_event c = parse(event.body);
                t.exec("INSERT INTO effects VALUES (?1, ?2, ?3, ?4)", event.id, c.type, c.charge,
                       c.amount);
                t.exec(
                    "INSERT INTO charges VALUES (?1, ?2, ?3) ON CONFLICT (id) DO "
                    "UPDATE SET status = excluded.status, version = excluded.version "
                    "WHERE excluded.version > charges.version",
                    c.charge, status_of(c.type), c.version);
                maybe_die("in_handler", event.id);
              }));
    } else if (mode == "gate") {
      server.Post("/webhooks/provider",
                  idem::http::webhook_handler(
                      events, receiver, [&](const idem::http::webhook_event& event) {
                        const charge_event c = parse(event.body);
                        gate.apply("charges", c.charge, c.version,
                                   [&](idem::sqlite_store::transaction& t) {
                                     t.exec("INSERT INTO effects VALUES (?1, ?2, ?3, ?4)", event.id,
                                            c.type, c.charge, c.amount);
                                     t.exec(
                                         "INSERT INTO charges VALUES (?1, ?2, ?3) ON CONFLICT "
                                         "(id) DO UPDATE SET status = excluded.status, "
                                         "version = excluded.version",
                                         c.charge, status_of(c.type), c.version);
                                     maybe_die("in_handler", event.id);
                                   });
                        // The gate committed; the inbox has not recorded the event yet.
                        maybe_die("after_effect", event.id);
                      }));
    } else {
      throw idem::testing::worker_usage_error("--mode must be tx or gate");
    }
    // After the handler made its answer, before cpp-httplib writes it.
    server.set_post_routing_handler([&](const httplib::Request& req, httplib::Response&) {
      if (die != "before_answer") return;
      const auto json = nlohmann::json::parse(req.body, nullptr, false);
      if (json.is_object() && json.value("id", "") == victim) maybe_die("before_answer", victim);
    });
    const int port = static_cast<int>(arguments.number("port"));
    if (idem::http::bind_with_backlog(server, "127.0.0.1", port) != port) {
      say("cannot bind " + std::to_string(port));
      return 4;
    }
    say("listening " + std::to_string(port));
    server.listen_after_bind();
    return 0;
  } catch (const idem::testing::worker_usage_error& error) {
    say(std::string("usage: ") + error.what());
    return 2;
  } catch (const std::exception& error) {
    say(std::string("error: ") + error.what());
    return 1;
  }
}
