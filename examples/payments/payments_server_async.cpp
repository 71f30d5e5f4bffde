// payments_server --async: the payments API on event loops (Boost.Beast, async_server.hpp), one
// io_context per thread, with the blocking server's rules (service.hpp) and guarantee.
//
// Per loop: an idem::async_idempotent and the processor's client (async_retrying), so a request
// is handled, from its read to its answer, on the loop its connection was handed to, and no
// two loops share a lock on the request path. The store:
//   * memory and SQLite: one store for every loop. SQLite blocks by nature: async_idempotent
//     runs its calls on a thread pool (store_executor), never on a loop;
//   * Redis: an idem::async_redis_store per loop, on that loop, its connections pipelined;
//   * PostgreSQL: an idem::async_postgres_store per loop, on that loop.
// The payments table (the book) is the blocking server's: its calls that block (SQLite, Redis
// through hiredis, PostgreSQL's reads) run on the same thread pool; the memory book's lock is
// held for a map lookup and is taken on the loop.
//
// The handler is the blocking one with async_step where that one has step, under the same step
// name, downstream keys and resumable-record name ("payments"), so payments_reconcile, which is
// blocking, finishes what an asynchronous server left, and the two kinds of server may share a
// store. While it waits for the processor, async_idempotent's heartbeat renews its lease: the
// charge may take as long as processor_deadline, not half the lease.
//
// SQLite and PostgreSQL: the payment row and its outbox message commit with the record or not
// at all, as in the blocking server: the handler charges outside any transaction, under the
// heartbeat, and answers idem::commit_with, whose writes async_idempotent makes in the
// transaction that completes the record (PostgreSQL's on the loop, SQLite's on the pool). A
// connection, or SQLite's write lock, is held for those writes, not for the processor's answer.
#include "async_processor_client.hpp"
#include "async_server.hpp"
#include "auth.hpp"
#include "server_settings.hpp"
#include "service.hpp"
#include "webhook_receiver.hpp"

#include <idem/asio.hpp>
#include <idem/http/beast.hpp>
#include <idem/store/postgres/async.hpp>
#include <idem/store/redis/async.hpp>

#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace payments {

namespace {

/// The book (service.hpp) as the loops call it: its blocking calls on the pool.
template <class Book>
class async_book {
 public:
  async_book(Book& book, asio::any_io_executor pool) : book_(book), pool_(std::move(pool)) {}

  /// book_error when the table cannot be reached: a 503 before the key is claimed. Only
  /// PostgreSQL's does anything, until it succeeded once; after, an unreachable database is the
  /// store's 503.
  asio::awaitable<void> prepare() {
    if constexpr (std::is_same_v<Book, postgres_book>) {
      if (!prepared_.load(std::memory_order_acquire)) {
        co_await off_loop(pool_, [this] { book_.prepare(); });
        prepared_.store(true, std::memory_order_release);
      }
    }
    co_return;
  }

  // The arguments are the caller's, alive until the call completes.
  asio::awaitable<void> insert(const payment_row& row, const payment_event& event) {
    if constexpr (std::is_same_v<Book, memory_book>) {
      book_.insert(row, event);
    } else {
      co_await off_loop(pool_, [&] { book_.insert(row, event); });
    }
  }

  asio::awaitable<std::optional<std::string>> find(const std::string& id,
                                                   const std::string& account) {
    if constexpr (std::is_same_v<Book, memory_book>) {
      co_return book_.find(id, account);
    } else {
      co_return co_await off_loop(pool_, [&] { return book_.find(id, account); });
    }
  }

 private:
  Book& book_;
  asio::any_io_executor pool_;
  std::atomic<bool> prepared_{false};
};

/// The blocking payment_charge as a coroutine: the charge as a recovery point under the same
/// name and downstream key, then the payment described (describe_payment, service.hpp).
asio::awaitable<charged> charge_payment(idem::async_handler_context& ctx,
                                        const idem::http_request& request,
                                        async_processor_client& processor,
                                        double crash_after_charge, double crash_when_asked) {
  const intent payment = *intent::parse(request.body).first;  // validated before the call
  const crash_plan plan = crash_plan::draw(request, crash_after_charge, crash_when_asked);
  const std::string step = "charge";
  const std::string charged_json = co_await ctx.async_step(
      step,
      [&]() -> asio::awaitable<std::string> {
        const idem::key_buffer key = ctx.downstream_key(step);
        // A lost lease (the claim taken over) ends the charge: the new holder asks again.
        std::string answer = co_await processor.charge(key.view(), payment, ctx.lease_lost_slot());
        plan.after_processor();
        co_return answer;
      },
      idem::with_next_write);
  plan.after_step();
  co_return describe_payment(ctx, payment, charged_json);
}

/// The handler for a book outside any transaction of the store (memory, Redis), as the blocking
/// payment_handler: the row once charged.
template <class Book>
struct async_payment_handler {
  async_processor_client* processor;
  async_book<Book>* book;
  double crash_after_charge = 0;
  double crash_when_asked = 0;

  asio::awaitable<idem::http_response> operator()(idem::async_handler_context& ctx,
                                                  const idem::http_request& request) const {
    charged done =
        co_await charge_payment(ctx, request, *processor, crash_after_charge, crash_when_asked);
    // Named, and passed by reference: GCC 12 destroys a braced temporary handed to a coroutine
    // by value twice.
    const payment_event event{payment_event_id(ctx), std::move(done.message)};
    co_await book->insert(done.row, event);
    co_return std::move(done.response);
  }
};

/// The writes a charged payment commits with its record, for the store this server gives
/// `Book`'s database: SQLite's blocking store takes the blocking handler's (payment_writes), run
/// where the store's calls run (the pool); the asynchronous PostgreSQL store's are sent on its
/// connection without waiting (send, publish): they go to the server with the completion and
/// COMMIT, in one round trip.
template <transactional_book Book>
struct async_writes {
  using transaction = typename Book::transaction;
  static std::function<void(transaction&)> of(charged& done) { return payment_writes<Book>(done); }
};
template <>
struct async_writes<postgres_book> {
  using transaction = idem::async_postgres_store::transaction;
  static transaction::writes_type of(charged& done) {
    return [row = std::move(done.row),
            message = std::move(done.message)](transaction& tx) -> asio::awaitable<void> {
      tx.send(postgres_book::insert_sql, {row.id, row.account, row.body});
      const std::string name(payment_succeeded);
      (void)co_await tx.publish(name, message);
    };
  }
};

/// SQLite's and PostgreSQL's: the charge as for the other books, outside any transaction (the
/// heartbeat keeping the lease meanwhile), and the row and its message as idem::commit_with's
/// writes, made in the transaction that completes the record: the row, its message and the
/// completed record commit together or not at all, as in the blocking server, but no
/// connection, and no SQLite write lock, is held while the processor answers.
template <transactional_book Book>
struct async_payment_handler<Book> {
  using transaction = typename async_writes<Book>::transaction;

  async_processor_client* processor;
  async_book<Book>* book;
  double crash_after_charge = 0;
  double crash_when_asked = 0;

  asio::awaitable<idem::commit_with<idem::http_response, transaction>> operator()(
      idem::async_handler_context& ctx, const idem::http_request& request) const {
    charged done =
        co_await charge_payment(ctx, request, *processor, crash_after_charge, crash_when_asked);
    idem::commit_with<idem::http_response, transaction> answer;
    answer.response = std::move(done.response);
    answer.writes = async_writes<Book>::of(done);
    co_return answer;
  }
};

template <class Store, class Book>
using async_payments_endpoint =
    idem::async_idempotent<async_payment_handler<Book>, server_policies<Store>>;

/// What one loop serves with.
template <class Store, class Book>
struct loop_service {
  loop_service(asio::any_io_executor loop, const server_settings& config, Store store,
               async_book<Book>& book, asio::any_io_executor pool)
      : processor(loop, config.processor),
        endpoint(loop,
                 async_payment_handler<Book>{&processor, &book, config.crash_after_charge,
                                             config.crash_when_asked},
                 options(std::move(store), config.lease, std::move(pool))) {}

  static typename async_payments_endpoint<Store, Book>::options options(
      Store store, std::chrono::milliseconds lease, asio::any_io_executor pool) {
    auto settings = endpoint_settings<typename async_payments_endpoint<Store, Book>::options>(
        std::move(store), lease);
    settings.store_executor = std::move(pool);  // used only by a store that blocks (SQLite)
    return settings;
  }

  async_processor_client processor;
  async_payments_endpoint<Store, Book> endpoint;
  idem::http::specification specification = idem::http::specification::of(endpoint);
};

/// The processor's webhooks on one loop (webhook_receiver.hpp): an async_inbox on the shared
/// SQLite file, its calls on the pool, and the provider status applied there too, through
/// idem's Beast binding.
class loop_webhooks {
 public:
  loop_webhooks(asio::any_io_executor loop, const server_settings& config,
                const idem::sqlite_store& store, provider_status& provider,
                asio::any_io_executor pool)
      : inbox_(loop, options(store, config.lease, pool)),
        receive_(idem::http::webhook_handler(
            inbox_, processor_webhooks(secret_from_file(config.webhook_secret_file)),
            [&provider, pool](const idem::http::webhook_event& event) -> asio::awaitable<void> {
              co_await off_loop(pool, [&] { provider.apply(event); });
            })) {}

  /// POST /v1/webhooks/processor, answered.
  asio::awaitable<reply> receive(const http_request_message& message) {
    const idem::http::beast_response answer = co_await receive_(message);
    reply out;
    out.status = static_cast<int>(answer.result_int());
    for (const auto& field : answer) {
      if (field.name() == http::field::content_type) {
        out.content_type = std::string(field.value());
      } else if (field.name() != http::field::content_length) {
        out.add_header(std::string(field.name_string()), std::string(field.value()));
      }
    }
    out.body = answer.body();
    co_return out;
  }

 private:
  using inbox_type = idem::async_inbox<webhook_policies>;

  static inbox_type::options options(const idem::sqlite_store& store,
                                     std::chrono::milliseconds lease, asio::any_io_executor pool) {
    inbox_type::options settings;
    settings.store = store;
    settings.lease = lease;
    settings.store_executor = std::move(pool);
    return settings;
  }

  inbox_type inbox_;
  std::function<asio::awaitable<idem::http::beast_response>(const http_request_message&)> receive_;
};

std::optional<std::string> header_of(const http_request_message& message, std::string_view name) {
  const auto found = message.find(name);
  if (found == message.end()) return std::nullopt;
  return std::string(found->value());
}

template <class Store, class Book>
class payments_routes {
 public:
  payments_routes(std::vector<std::unique_ptr<loop_service<Store, Book>>>& services,
                  std::vector<std::unique_ptr<loop_webhooks>>& webhooks, async_book<Book>& book,
                  const api_keys& keys, double crash_when_asked)
      : services_(services),
        webhooks_(webhooks),
        book_(book),
        keys_(keys),
        crash_when_asked_(crash_when_asked) {}

  /// The refusal of a request from its head, before its body is read: its caller's (auth.hpp),
  /// on the routes that need one.
  std::optional<reply> admit(const http::request_header<>& head) const {
    const std::string_view method(head.method_string().data(), head.method_string().size());
    if (!route_needs_caller(method, path_of(head))) return std::nullopt;
    auto caller = caller_of(head);
    if (reply* refusal = std::get_if<reply>(&caller)) return std::move(*refusal);
    return std::nullopt;
  }

  asio::awaitable<reply> operator()(std::size_t loop, const http_request_message& message) {
    const std::string_view path = path_of(message);
    if (message.method() == http::verb::post && path == "/v1/payments") {
      co_return co_await pay(*services_[loop], message);
    }
    if (message.method() == http::verb::post && path == processor_webhook_path &&
        !webhooks_.empty()) {
      co_return co_await webhooks_[loop]->receive(message);
    }
    if (message.method() == http::verb::get) {
      if (path == services_[loop]->specification.uri) {
        co_return specification_reply(services_[loop]->specification, message);
      }
      if (const auto id = payment_id_in(path)) co_return co_await look_up(*id, message);
    }
    co_return error_reply(404, "no such route");
  }

 private:
  std::variant<std::string, reply> caller_of(const http::request_header<>& head) const {
    return authenticate(keys_, values_of(head, authorization_field),
                        values_of(head, account_field));
  }

  /// GET /idempotency, where every problem's type points: the specification, HTML or JSON, as
  /// idem's bindings serve it.
  static reply specification_reply(const idem::http::specification& spec,
                                   const http_request_message& message) {
    const std::string_view accept(message[http::field::accept].data(),
                                  message[http::field::accept].size());
    const bool wants_json = accept.find("application/json") != std::string_view::npos &&
                            accept.find("text/html") == std::string_view::npos;
    if (wants_json) return {200, {}, "application/json", idem::http::specification_json(spec)};
    return {200, {}, "text/html; charset=utf-8", idem::http::specification_html(spec)};
  }

  asio::awaitable<reply> pay(loop_service<Store, Book>& service,
                             const http_request_message& message) {
    auto caller = caller_of(message);  // admitted: checked again for the account
    if (reply* refusal = std::get_if<reply>(&caller)) co_return std::move(*refusal);
    const payment_post post{std::move(std::get<std::string>(caller)), message.body(),
                            header_of(message, "Idempotency-Key"),
                            header_of(message, chaos_crash_header)};
    if (auto refused = refused_before_claim(post)) co_return std::move(*refused);
    co_await book_.prepare();  // book_error: 503, before the key is claimed
    const idem::http_request request = payment_request(post, crash_when_asked_);
    // The key and the caller's deadline read as idem's bindings read them (a quoted key and a
    // bare one are the same key); a wrong field is a problem, before anything is claimed.
    const idem::http::call_fields fields(
        [&message](std::string_view name) { return idem::http::key_field_values(message, name); },
        service.specification);
    if (fields.refusal()) {
      reply refused;
      idem::http::write_problem(*fields.refusal(), refused);
      co_return refused;
    }
    const auto outcome = co_await service.endpoint.async_call(
        post.account, fields.key(), request, fields.deadline(), asio::use_awaitable);
    co_return outcome_reply(outcome, service.specification);
  }

  asio::awaitable<reply> look_up(const std::string& id, const http_request_message& message) {
    auto caller = caller_of(message);
    if (reply* refusal = std::get_if<reply>(&caller)) co_return std::move(*refusal);
    co_return lookup_reply(co_await book_.find(id, std::get<std::string>(caller)));
  }

  std::vector<std::unique_ptr<loop_service<Store, Book>>>& services_;
  std::vector<std::unique_ptr<loop_webhooks>>& webhooks_;
  async_book<Book>& book_;
  const api_keys& keys_;
  double crash_when_asked_;
};

/// Serves until the process is stopped (it is killed, as the blocking server is: every payment
/// is in the store, and a request in flight is as a crash). `make_store(loop)` makes a loop's
/// store handle.
template <class MakeStore, class Book>
int serve(const server_settings& config, MakeStore make_store, Book& book) {
  using store_type = std::invoke_result_t<MakeStore&, asio::any_io_executor>;
  raise_open_file_limit();
  // Blocking calls (SQLite's store, the books): as many threads as loops, and at least 4, so a
  // slow call does not hold up the loops' others.
  asio::thread_pool pool(std::max<std::size_t>(4, config.threads));
  async_book<Book> payments_book(book, pool.get_executor());
  event_loops loops(config.threads);
  std::vector<std::unique_ptr<loop_service<store_type, Book>>> services;
  for (std::size_t i = 0; i < loops.size(); ++i) {
    const asio::any_io_executor loop = loops.at(i).get_executor();
    services.push_back(std::make_unique<loop_service<store_type, Book>>(
        loop, config, make_store(loop), payments_book, pool.get_executor()));
  }
  std::optional<provider_status> provider;
  std::optional<idem::sqlite_store> webhook_store;
  std::vector<std::unique_ptr<loop_webhooks>> webhooks;
  if (!config.webhook_db.empty()) {
    provider.emplace(config.webhook_db, config.crash_in_webhook);
    webhook_store.emplace(config.webhook_db);
    for (std::size_t i = 0; i < loops.size(); ++i) {
      webhooks.push_back(std::make_unique<loop_webhooks>(
          loops.at(i).get_executor(), config, *webhook_store, *provider, pool.get_executor()));
    }
  }
  const api_keys keys = keys_from(config.auth_secret_file, "payments_server", true);
  auto routes = std::make_shared<payments_routes<store_type, Book>>(
      services, webhooks, payments_book, keys, config.crash_when_asked);
  http_limits limits;
  limits.read_timeout = config.read_timeout;
  limits.header_limit = max_request_header_bytes;
  limits.max_fields = max_request_fields;
  limits.body_limit = max_request_body_bytes;
  limits.max_connections = config.max_connections;
  http_server server(
      loops, [routes](const http::request_header<>& head) { return routes->admit(head); },
      [routes](std::size_t loop, const http_request_message& message) {
        return (*routes)(loop, message);
      },
      limits);
  int port = 0;
  try {
    port = server.bind(config.port);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "payments_server: cannot listen on 127.0.0.1:%d: %s\n", config.port,
                 e.what());
    return 1;
  }
  std::printf("payments_server: listening on %d\n", port);
  std::fflush(stdout);
  server.start();
  loops.run();
  return 1;  // the loops never run out of work
}

}  // namespace

std::optional<int> serve_async(const server_settings& config, const std::string& spec) {
  if (spec == "memory") {
    memory_book book;
    const idem::memory_store shared;  // a handle: every loop's copy has the same records
    return serve(
        config, [shared](const asio::any_io_executor&) { return shared; }, book);
  }
  if (spec.starts_with("sqlite:") && spec.size() > 7) {
    const std::string path = spec.substr(7);
    const idem::sqlite_store shared{path};  // creates the file and idem's tables
    sqlite_book book(path);
    return serve(
        config, [shared](const asio::any_io_executor&) { return shared; }, book);
  }
  if (spec.starts_with("postgres:")) {
    idem::async_postgres_store::options options;
    static_cast<idem::postgres_store::options&>(options) = postgres_options(spec.substr(9));
    // The blocking server's 16 connections, shared out over the loops.
    options.pool_size = std::max<std::size_t>(2, 16 / config.threads);
    postgres_book book(options.conninfo);
    return serve(
        config,
        [options](const asio::any_io_executor& loop) {
          return idem::async_postgres_store{loop, options};
        },
        book);
  }
  if (spec.starts_with("redis:")) {
    const auto where = endpoint::parse("http://" + spec.substr(6));
    idem::async_redis_store::options options;
    options.host = where.host;
    options.port = where.port;
    redis_book book(where.host, where.port);
    return serve(
        config,
        [options](const asio::any_io_executor& loop) {
          return idem::async_redis_store{loop, options};
        },
        book);
  }
  return std::nullopt;
}

}  // namespace payments
