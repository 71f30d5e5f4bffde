// payments_floor_server --async: the floor's recipe (recipe.hpp) on the demo's event loops
// (examples/payments/async_server.hpp: Boost.Beast, one io_context per thread, one acceptor
// handing connections out in turn), laid out as payments_server --async lays out idem's:
//   * per loop, the processor's client (async_processor_client.hpp, the demo's), so a request is
//     handled from its read to its answer on the loop its connection was handed to;
//   * SQLite: one set of records for every loop, its calls (which block) on a thread pool of as
//     many threads as loops, at least 4: the pool payments_server gives idem's store_executor;
//   * PostgreSQL: records per loop, on that loop, through non-blocking libpq, with the
//     connections payments_server gives each loop's idem::async_postgres_store (16 shared out,
//     at least 2 a loop).
#include "async_postgres_records.hpp"
#include "async_processor_client.hpp"
#include "async_server.hpp"
#include "auth.hpp"
#include "floor_settings.hpp"
#include "recipe.hpp"
#include "server_settings.hpp"
#include "sqlite_records.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace floor_server {
namespace {

namespace asio = boost::asio;
using payments::off_loop;

/// The SQLite records as a loop calls them: each call on the pool.
class async_sqlite_records {
 public:
  async_sqlite_records(sqlite_records& records, asio::any_io_executor pool)
      : records_(records), pool_(std::move(pool)) {}

  asio::awaitable<std::optional<std::optional<record>>> claim(std::string account, std::string key,
                                                              std::string hash) {
    co_return co_await off_loop(pool_, [&] { return records_.claim(account, key, hash); });
  }
  asio::awaitable<void> complete(std::string account, std::string key, completion done) {
    co_await off_loop(pool_, [&] { records_.complete(account, key, done); });
  }
  asio::awaitable<void> release(std::string account, std::string key) {
    co_await off_loop(pool_, [&] { records_.release(account, key); });
  }
  asio::awaitable<std::optional<std::string>> find(std::string id, std::string account) {
    co_return co_await off_loop(pool_, [&] { return records_.find(id, account); });
  }

 private:
  sqlite_records& records_;
  asio::any_io_executor pool_;
};

/// What one loop serves with: `make(loop, index)` makes its records.
template <class Records>
struct loop_service {
  template <class MakeRecords>
  loop_service(const asio::any_io_executor& loop, const settings& config, MakeRecords& make,
               std::size_t index)
      : processor(loop, config.processor), records(make(loop, index)) {}

  payments::async_processor_client processor;
  Records records;
};

std::optional<std::string> header_of(const payments::http_request_message& message,
                                     std::string_view name) {
  const auto found = message.find(name);
  if (found == message.end()) return std::nullopt;
  return std::string(found->value());
}

/// One POST /v1/payments, by the recipe (floor_server.cpp's pay, awaiting the store and the
/// processor).
template <class Records>
asio::awaitable<reply> pay(loop_service<Records>& service, std::string account,
                           const payments::http_request_message& message) {
  const payments::payment_post post{std::move(account), message.body(),
                                    header_of(message, "Idempotency-Key"), std::nullopt};
  if (auto refused = payments::refused_before_claim(post)) co_return std::move(*refused);
  const key_read key = read_key(post.key);
  if (key.refusal) co_return *key.refusal;
  const std::string hash = request_hash(post.body);
  const auto existing = co_await service.records.claim(post.account, key.key, hash);
  if (existing) co_return *existing ? answer_for(**existing, hash) : answer_released();
  const payments::intent payment = *payments::intent::parse(post.body).first;
  const derived_keys keys = derive(post.account, key.key);
  std::string charged;
  std::exception_ptr failed;
  try {
    charged = co_await service.processor.charge(keys.charge_key, payment);
  } catch (...) {
    failed = std::current_exception();  // no co_await inside a handler
  }
  if (failed) {
    // The charge failed (502): a retry must run it, so the claim goes.
    try {
      co_await service.records.release(post.account, key.key);
    } catch (const std::exception&) {
    }
    std::rethrow_exception(failed);
  }
  const completion done = describe(keys, post.account, payment, charged);
  co_await service.records.complete(post.account, key.key, done);
  co_return reply{201, {}, "application/json", done.body};
}

template <class Records>
asio::awaitable<reply> look_up(loop_service<Records>& service, const std::string& id,
                               const std::string& account) {
  co_return payments::lookup_reply(co_await service.records.find(id, account));
}

/// The caller's account (the demo's auth.hpp), or the refusal.
std::variant<std::string, reply> caller_of(const payments::api_keys& keys,
                                           const payments::http::request_header<>& head) {
  return payments::authenticate(keys, payments::values_of(head, payments::authorization_field),
                                payments::values_of(head, payments::account_field));
}

/// Serves until the process is stopped (it is killed). `make_records(loop, index)` makes a
/// loop's records.
template <class MakeRecords>
int serve(const settings& config, MakeRecords make_records) {
  using records_type = std::invoke_result_t<MakeRecords&, asio::any_io_executor, std::size_t>;
  payments::raise_open_file_limit();
  payments::event_loops loops(config.threads);
  std::vector<std::unique_ptr<loop_service<records_type>>> services;
  for (std::size_t i = 0; i < loops.size(); ++i) {
    const asio::any_io_executor loop = loops.at(i).get_executor();
    services.push_back(std::make_unique<loop_service<records_type>>(loop, config, make_records, i));
  }
  const payments::api_keys keys = payments::keys_from(config.auth_secret_file, program, true);
  // The caller authenticated from the head, before the body is read, and again for the account,
  // as the demo's event-loop server does it.
  auto admit = [&keys](const payments::http::request_header<>& head) -> std::optional<reply> {
    const std::string_view method(head.method_string().data(), head.method_string().size());
    if (!payments::route_needs_caller(method, payments::path_of(head))) return std::nullopt;
    auto caller = caller_of(keys, head);
    if (reply* refusal = std::get_if<reply>(&caller)) return std::move(*refusal);
    return std::nullopt;
  };
  auto route = [&services, &keys](
                   std::size_t loop,
                   const payments::http_request_message& message) -> asio::awaitable<reply> {
    const std::string_view path = payments::path_of(message);
    const bool paying = message.method() == payments::http::verb::post && path == "/v1/payments";
    const auto id = message.method() == payments::http::verb::get ? payments::payment_id_in(path)
                                                                  : std::nullopt;
    if (!paying && !id) co_return payments::error_reply(404, "no such route");
    auto caller = caller_of(keys, message);  // admitted: checked again for the account
    if (reply* refusal = std::get_if<reply>(&caller)) co_return std::move(*refusal);
    if (paying) co_return co_await pay(*services[loop], std::get<std::string>(caller), message);
    co_return co_await look_up(*services[loop], *id, std::get<std::string>(caller));
  };
  payments::http_server server(
      loops, admit, route,
      payments::http_limits{config.read_timeout, payments::max_request_header_bytes,
                            payments::max_request_body_bytes});
  int port = 0;
  try {
    port = server.bind(config.port);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: cannot listen on 127.0.0.1:%d: %s\n", program, config.port, e.what());
    return 1;
  }
  std::printf("%s: listening on %d\n", program, port);
  std::fflush(stdout);
  server.start();
  loops.run();
  return 1;  // the loops never run out of work
}

}  // namespace

std::optional<int> serve_async(const settings& config, const std::string& spec) {
  if (spec.starts_with("sqlite:") && spec.size() > 7) {
    sqlite_records shared(spec.substr(7));
    asio::thread_pool pool(std::max<std::size_t>(4, config.threads));
    return serve(config, [&shared, &pool](const asio::any_io_executor&, std::size_t) {
      return async_sqlite_records(shared, pool.get_executor());
    });
  }
  if (spec.starts_with("postgres:")) {
    const std::string conninfo = spec.substr(9);
    const std::size_t per_loop = std::max<std::size_t>(2, 16 / config.threads);
    return serve(config, [&conninfo, per_loop](const asio::any_io_executor& loop, std::size_t i) {
      return async_postgres_records(loop, conninfo, per_loop, i == 0);
    });
  }
  return std::nullopt;
}

}  // namespace floor_server
