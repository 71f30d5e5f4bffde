// idem/grpc.hpp over a real gRPC server: a grpc::Server on loopback, a real channel and stub for
// the Charges service (charges.proto), every verdict as a status, against the memory store and
// SQLite (each behind faulty_store, so that the same server can also be down or full); and the
// client side, idem::retrying with grpc_classifier and grpc_prepare, against that server.
#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>

#include <idem/grpc.hpp>
#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>
#include <idem/testing/faulty_store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "charges.grpc.pb.h"
#include "support/gate.hpp"
#include "support/temporary_directory.hpp"

using namespace std::chrono_literals;
using idem::test::ChargeReply;
using idem::test::ChargeRequest;
using idem::test::Charges;

namespace {

using idem_test::gate;

/// What the handler did, shared by the copies of it.
struct charge_log {
  std::atomic<int> runs{0};     // calls of the handler
  std::atomic<int> charges{0};  // charges made (the effect that must happen once)
  std::atomic<int> flaky{0};    // "flaky" calls seen
  gate door;
  std::mutex mutex;
  std::vector<std::string> keys;  // the key of each run
};

/// The Charges.Charge handler: see charges.proto for what each `behaviour` does.
struct charge_function {
  std::shared_ptr<charge_log> log = std::make_shared<charge_log>();

  grpc::Status operator()(idem::handler_context& ctx,
                          const idem::grpc_request<ChargeRequest>& request,
                          ChargeReply& reply) const {
    log->door.pass();
    ++log->runs;
    {
      std::lock_guard lock(log->mutex);
      log->keys.emplace_back(ctx.key());
    }
    const std::string& behaviour = request->behaviour();
    if (behaviour == "decline") {
      return {grpc::StatusCode::FAILED_PRECONDITION, "card declined", "\x08\x09 details"};
    }
    if (behaviour == "flaky" && ++log->flaky == 1) {
      return {grpc::StatusCode::UNAVAILABLE, "try again"};
    }
    const int number = ++log->charges;
    reply.set_charge_id("ch_" + std::to_string(number));
    reply.set_amount(request->amount());
    reply.set_number(number);
    const std::chrono::nanoseconds left = request.time_left();
    reply.set_time_left_ms(
        left == std::chrono::nanoseconds::max()
            ? -1
            : std::chrono::duration_cast<std::chrono::milliseconds>(left).count());
    if (behaviour == "big") reply.set_padding(std::string(4096, 'x'));
    return grpc::Status::OK;
  }
};

using charge_handler = idem::grpc_unary_handler<ChargeReply, charge_function>;

struct memory_factory {
  idem::memory_store make() { return idem::memory_store{}; }
};

struct sqlite_factory {
  idem::testing::temporary_directory directory{"idem-grpc"};
  idem::sqlite_store make() { return idem::sqlite_store{directory.file("keys.db")}; }
};

/// The service: one idempotent wrapper, the account as the scope.
template <class Guarded>
class charges_service final : public Charges::Service {
 public:
  charges_service(Guarded& guarded, const idem::grpc_serve_options& options)
      : guarded_(&guarded), options_(&options) {}

  grpc::Status Charge(grpc::ServerContext* context, const ChargeRequest* request,
                      ChargeReply* reply) override {
    return idem::grpc_serve(*guarded_, request->account(), *context, *request, *reply, *options_);
  }

 private:
  Guarded* guarded_;
  const idem::grpc_serve_options* options_;
};

/// One call's answer, with the metadata the server sent.
struct answer {
  grpc::Status status;
  ChargeReply reply;
  std::multimap<std::string, std::string> initial;
  std::multimap<std::string, std::string> trailing;

  static std::string first(const std::multimap<std::string, std::string>& metadata,
                           const std::string& name) {
    const auto found = metadata.find(name);
    return found == metadata.end() ? std::string() : found->second;
  }
  std::string replayed() const { return first(initial, "idempotent-replayed"); }
  std::string problem() const { return first(trailing, "idempotency-problem"); }
  std::string retry_after() const { return first(trailing, "retry-after"); }
};

std::multimap<std::string, std::string> copy_of(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  std::multimap<std::string, std::string> out;
  for (const auto& [name, value] : metadata)
    out.emplace(std::string(name.data(), name.size()), std::string(value.data(), value.size()));
  return out;
}

ChargeRequest charge(const std::string& account, std::int64_t amount,
                     const std::string& behaviour = "") {
  ChargeRequest request;
  request.set_account(account);
  request.set_amount(amount);
  request.set_currency("EUR");
  request.set_behaviour(behaviour);
  return request;
}

template <class Factory>
struct binding_fixture {
  using inner_store = decltype(std::declval<Factory&>().make());
  using store_type = idem::testing::faulty_store<inner_store>;
  struct policies : idem::default_policies {
    using store = store_type;
  };
  using guarded_type = idem::idempotent<charge_handler, policies>;

  Factory factory;
  store_type store{factory.make()};
  charge_function function;
  std::unique_ptr<guarded_type> charges;
  idem::grpc_serve_options options;
  std::unique_ptr<charges_service<guarded_type>> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<Charges::Stub> stub;

  binding_fixture() {
    typename guarded_type::options parts;
    parts.store = store;
    parts.lease = 20s;
    parts.max_response_bytes = 1024;
    charges =
        std::make_unique<guarded_type>(idem::grpc_unary<ChargeReply>(function), std::move(parts));
    service = std::make_unique<charges_service<guarded_type>>(*charges, options);
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    REQUIRE(server);
    REQUIRE(port > 0);
    stub = Charges::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                grpc::InsecureChannelCredentials()));
  }
  ~binding_fixture() {
    function.log->door.set(true);
    server->Shutdown(std::chrono::system_clock::now() + 5s);
  }
  binding_fixture(const binding_fixture&) = delete;
  binding_fixture& operator=(const binding_fixture&) = delete;

  /// A call with every key in `keys` as an idempotency-key value, and a deadline `timeout` from
  /// now (none when zero).
  answer call(const std::vector<std::string>& keys, const ChargeRequest& request,
              std::chrono::nanoseconds timeout = 10s) {
    grpc::ClientContext context;
    for (const std::string& key : keys)
      context.AddMetadata("idempotency-key", key);
    if (timeout != std::chrono::nanoseconds::zero()) {
      context.set_deadline(
          std::chrono::system_clock::now() +
          std::chrono::duration_cast<std::chrono::system_clock::duration>(timeout));
    }
    answer out;
    out.status = stub->Charge(&context, request, &out.reply);
    out.initial = copy_of(context.GetServerInitialMetadata());
    out.trailing = copy_of(context.GetServerTrailingMetadata());
    return out;
  }
  answer call(const std::string& key, const ChargeRequest& request) {
    return call(std::vector<std::string>{key}, request);
  }
  int runs() const { return function.log->runs.load(); }
};

}  // namespace

TEMPLATE_TEST_CASE("grpc: a first call runs and its repeat replays the reply byte for byte",
                   "[grpc]", memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  const answer first = f.call(R"("k-1")", charge("acct-1", 100));
  REQUIRE(first.status.ok());
  CHECK(first.reply.charge_id() == "ch_1");
  CHECK(first.replayed().empty());
  // The bare key is the same key.
  const answer repeat = f.call("k-1", charge("acct-1", 100));
  REQUIRE(repeat.status.ok());
  CHECK(repeat.reply.SerializeAsString() == first.reply.SerializeAsString());
  CHECK(repeat.replayed() == "true");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("grpc: an error status the handler returned is replayed as it was", "[grpc]",
                   memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  const answer first = f.call("k-1", charge("acct-1", 100, "decline"));
  CHECK(first.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  const answer repeat = f.call("k-1", charge("acct-1", 100, "decline"));
  CHECK(repeat.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(repeat.status.error_message() == "card declined");
  CHECK(repeat.status.error_details() == first.status.error_details());
  CHECK(repeat.replayed() == "true");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("grpc: a key reused with another request is INVALID_ARGUMENT key-reused",
                   "[grpc]", memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  REQUIRE(f.call("k-1", charge("acct-1", 100)).status.ok());
  const answer reused = f.call("k-1", charge("acct-1", 999));
  CHECK(reused.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(reused.problem() == "key-reused");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE(
    "grpc: a repeat while the first runs is ABORTED with the lease left as retry-after", "[grpc]",
    memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  f.function.log->door.set(false);
  std::optional<answer> first;
  std::thread original([&] { first.emplace(f.call("k-1", charge("acct-1", 100))); });
  f.function.log->door.wait_until_entered();
  const answer concurrent = f.call("k-1", charge("acct-1", 100));
  f.function.log->door.set(true);
  original.join();
  CHECK(concurrent.status.error_code() == grpc::StatusCode::ABORTED);
  CHECK(concurrent.problem() == "request-outstanding");
  const int retry_after = std::stoi(concurrent.retry_after());
  CHECK(retry_after > 0);
  CHECK(retry_after <= 20);  // the lease
  REQUIRE(first);
  CHECK(first->status.ok());
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE("grpc: key misuse is INVALID_ARGUMENT before anything is claimed", "[grpc]",
                   memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  const answer missing = f.call(std::vector<std::string>{}, charge("acct-1", 100));
  CHECK(missing.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(missing.problem() == "missing-key");

  const answer twice =
      f.call(std::vector<std::string>{R"("k-1")", R"("k-2")"}, charge("acct-1", 100));
  CHECK(twice.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(twice.problem() == "several-keys");

  for (const std::string malformed : {R"("k-1)", R"("k-1", "k-2")", R"("")", R"("a b")"}) {
    CAPTURE(malformed);
    const answer refused = f.call(malformed, charge("acct-1", 100));
    CHECK(refused.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(refused.problem() == "invalid-key");
  }
  CHECK(f.runs() == 0);
  // Nothing was claimed: each key, sent well, runs.
  CHECK(f.call("k-1", charge("acct-1", 100)).status.ok());
  CHECK(f.call("k-2", charge("acct-1", 100)).status.ok());
  CHECK(f.runs() == 2);
}

TEMPLATE_TEST_CASE("grpc: a store that is down or full is UNAVAILABLE and runs nothing", "[grpc]",
                   memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  using mode = typename binding_fixture<TestType>::store_type::mode;
  f.store.fail(mode::unavailable);
  const answer down = f.call("k-1", charge("acct-1", 100));
  CHECK(down.status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(down.problem() == "store-unavailable");
  f.store.fail(mode::full);
  const answer full = f.call("k-1", charge("acct-1", 100));
  CHECK(full.status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(full.problem() == "store-full");
  CHECK(f.runs() == 0);
  f.store.heal();
  CHECK(f.call("k-1", charge("acct-1", 100)).status.ok());
}

TEMPLATE_TEST_CASE("grpc: keys belong to their scope, another account's same key runs", "[grpc]",
                   memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  CHECK(f.call("k-1", charge("a", 1)).status.ok());
  const answer other = f.call("k-1", charge("b", 1));
  CHECK(other.status.ok());
  CHECK(other.replayed().empty());
  CHECK(other.reply.number() == 2);
  CHECK(f.runs() == 2);
}

TEMPLATE_TEST_CASE("grpc: a reply too large to keep reaches its caller, its repeats get INTERNAL",
                   "[grpc]", memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  const answer first = f.call("k-1", charge("acct-1", 100, "big"));
  REQUIRE(first.status.ok());
  CHECK(first.reply.padding().size() == 4096);
  const answer repeat = f.call("k-1", charge("acct-1", 100, "big"));
  CHECK(repeat.status.error_code() == grpc::StatusCode::INTERNAL);
  CHECK(repeat.problem() == "response-too-large");
  CHECK(f.runs() == 1);
}

TEMPLATE_TEST_CASE(
    "grpc: a call with its deadline spent is refused DEADLINE_EXCEEDED and the handler never runs",
    "[grpc]", memory_factory, sqlite_factory) {
  binding_fixture<TestType> f;
  const answer spent = f.call({"k-1"}, charge("acct-1", 100), -1s);
  CHECK(spent.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  // Less left than the server's minimum: the server refuses it, before claiming the key.
  f.options.min_time_left = 30s;
  const answer short_call = f.call({"k-1"}, charge("acct-1", 100), 5s);
  CHECK(short_call.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(short_call.problem() == "deadline-exceeded");
  CHECK(f.runs() == 0);
  const answer enough = f.call({"k-1"}, charge("acct-1", 100), 60s);
  CHECK(enough.status.ok());
  CHECK(enough.replayed().empty());
  CHECK(f.runs() == 1);
}

TEST_CASE("grpc: the handler sees what is left of the call's deadline", "[grpc]") {
  binding_fixture<memory_factory> f;
  const answer timed = f.call({"k-1"}, charge("acct-1", 100), 30s);
  REQUIRE(timed.status.ok());
  CHECK(timed.reply.time_left_ms() > 20'000);
  // gRPC sends the timeout (grpc-timeout) rounded up to a few significant digits, so the server
  // may see a little more than the client set.
  CHECK(timed.reply.time_left_ms() <= 31'000);
  const answer untimed = f.call({"k-2"}, charge("acct-1", 100), 0s);
  REQUIRE(untimed.status.ok());
  CHECK(untimed.reply.time_left_ms() == -1);
}

namespace {

struct grpc_client_policies : idem::default_policies {
  using classifier = idem::grpc_classifier;
  using clock = idem::manual_clock;  // waits return at once
  static constexpr std::chrono::seconds deadline{60};
};

}  // namespace

TEST_CASE("grpc: retrying repeats an UNAVAILABLE under the same key and the charge happens once",
          "[grpc]") {
  binding_fixture<memory_factory> f;
  ChargeReply reply;
  const ChargeRequest request = charge("acct-1", 100, "flaky");
  auto call = [&](const idem::attempt_context& attempt) {
    grpc::ClientContext context;
    idem::grpc_prepare(context, attempt);
    return idem::grpc_result::of(f.stub->Charge(&context, request, &reply), context);
  };
  idem::retrying<decltype(call), grpc_client_policies> charge_once{call};
  const auto outcome = charge_once();
  REQUIRE(outcome);
  CHECK(outcome.value().ok());
  CHECK(outcome.attempts() == 2);
  CHECK(outcome.history()[0].kind == idem::disposition::transient);
  CHECK(reply.number() == 1);
  CHECK(f.function.log->charges.load() == 1);
  CHECK(f.runs() == 2);
  // Both runs had the operation's one key: the first released it by answering UNAVAILABLE.
  const std::vector<std::string> expected(2, std::string(outcome.key()));
  CHECK(f.function.log->keys == expected);
}

TEST_CASE("grpc: retrying waits the retry-after of an ABORTED and then gets the first call's reply",
          "[grpc]") {
  binding_fixture<memory_factory> f;
  f.function.log->door.set(false);
  std::optional<answer> first;
  std::thread original;
  const ChargeRequest request = charge("acct-1", 100);
  ChargeReply reply;
  auto call = [&](const idem::attempt_context& attempt) {
    if (attempt.attempt() == 1) {
      // The key's first call, under the operation's key, held at the gate.
      original = std::thread(
          [&, key = std::string(attempt.key())] { first.emplace(f.call(key, request)); });
      f.function.log->door.wait_until_entered();
    } else {
      f.function.log->door.set(true);
      original.join();
    }
    grpc::ClientContext context;
    idem::grpc_prepare(context, attempt);
    return idem::grpc_result::of(f.stub->Charge(&context, request, &reply), context);
  };
  idem::retrying<decltype(call), grpc_client_policies> charge_once{call};
  const auto outcome = charge_once();
  if (original.joinable()) {
    f.function.log->door.set(true);
    original.join();
  }
  REQUIRE(outcome);
  CHECK(outcome.attempts() == 2);
  const idem::attempt_record& aborted = outcome.history()[0];
  CHECK(aborted.code == static_cast<int>(grpc::StatusCode::ABORTED));
  CHECK(aborted.delay_from_retry_after);
  CHECK(aborted.delay_after > 0s);
  CHECK(aborted.delay_after <= 20s);
  CHECK(outcome.value().replayed);
  REQUIRE(first);
  CHECK(reply.SerializeAsString() == first->reply.SerializeAsString());
  CHECK(f.runs() == 1);
}

TEST_CASE("grpc: grpc_classifier judges statuses by the gRPC rules, with the server's retry-after",
          "[grpc]") {
  const idem::grpc_classifier classifier;
  CHECK(classifier.classify(grpc::Status::OK).kind == idem::disposition::success);
  CHECK(classifier.classify(grpc::Status(grpc::StatusCode::UNAVAILABLE, "")).kind ==
        idem::disposition::transient);
  CHECK(classifier.classify(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "")).kind ==
        idem::disposition::ambiguous);
  for (const grpc::StatusCode code :
       {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::FAILED_PRECONDITION,
        grpc::StatusCode::ALREADY_EXISTS, grpc::StatusCode::INTERNAL}) {
    CAPTURE(code);
    CHECK(classifier.classify(grpc::Status(code, "")).kind == idem::disposition::permanent);
  }
  const idem::grpc_result aborted{grpc::Status(grpc::StatusCode::ABORTED, ""), "3", false};
  const idem::classification verdict = classifier.classify(aborted);
  CHECK(verdict.kind == idem::disposition::transient);
  CHECK(verdict.code == 10);
  CHECK(verdict.retry_after == "3");
}

TEST_CASE("grpc: each verdict has its status, and a kept answer decodes as it was", "[grpc]") {
  using idem::grpc_status;
  using idem::verdict;
  CHECK(idem::grpc_status_for(verdict::in_progress) == grpc_status::aborted);
  CHECK(idem::grpc_status_for(verdict::mismatch) == grpc_status::invalid_argument);
  CHECK(idem::grpc_status_for(verdict::missing_key) == grpc_status::invalid_argument);
  CHECK(idem::grpc_status_for(verdict::invalid_key) == grpc_status::invalid_argument);
  CHECK(idem::grpc_status_for(verdict::body_too_large) == grpc_status::invalid_argument);
  CHECK(idem::grpc_status_for(verdict::store_unavailable) == grpc_status::unavailable);
  CHECK(idem::grpc_status_for(verdict::store_full) == grpc_status::unavailable);
  CHECK(idem::grpc_status_for(verdict::cancelled) == grpc_status::unavailable);
  CHECK(idem::grpc_status_for(verdict::response_too_large) == grpc_status::internal);
  CHECK(idem::grpc_status_for(verdict::deadline_exceeded) == grpc_status::deadline_exceeded);
  const idem::grpc_response kept{9, "declined", std::string("\0\1", 2), std::string("\x08\x01")};
  CHECK(idem::decode<idem::grpc_response>(idem::encode(kept)) == kept);
  CHECK_THROWS_AS(idem::decode<idem::grpc_response>("H\x01"), idem::codec_error);
}

TEST_CASE("grpc: a handler that takes the SQLite transaction writes with the record", "[grpc]") {
  idem::testing::temporary_directory directory{"idem-grpc-transaction"};
  struct policies : idem::default_policies {
    using store = idem::sqlite_store;
  };
  auto write_charge = [](idem::handler_context& ctx,
                         const idem::grpc_request<ChargeRequest>& request, ChargeReply& reply,
                         idem::sqlite_store::transaction& transaction) {
    transaction.exec("CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, amount INTEGER)");
    transaction.exec("INSERT INTO charges (key, amount) VALUES (?, ?)", std::string(ctx.key()),
                     request->amount());
    std::int64_t rows = 0;
    transaction.query("SELECT count(*) FROM charges",
                      [&](sqlite3_stmt* row) { rows = sqlite3_column_int64(row, 0); });
    reply.set_number(rows);
    return grpc::Status::OK;
  };
  typename idem::idempotent<idem::grpc_unary_handler<ChargeReply, decltype(write_charge)>,
                            policies>::options parts;
  parts.store = idem::sqlite_store{directory.file("keys.db")};
  idem::idempotent<idem::grpc_unary_handler<ChargeReply, decltype(write_charge)>, policies> charges{
      idem::grpc_unary<ChargeReply>(write_charge), std::move(parts)};
  // Called as grpc_serve calls it, with a server context of no call (no deadline, no metadata).
  grpc::ServerContext context;
  const ChargeRequest request = charge("acct-1", 100);
  const idem::grpc_request<ChargeRequest> guarded{request, context};
  ChargeReply first;
  CHECK(idem::grpc_answer(charges("acct-1", "k-1", guarded), context, first).ok());
  CHECK(first.number() == 1);
  ChargeReply repeat;
  const auto replayed = charges("acct-1", "k-1", guarded);
  CHECK(replayed.verdict() == idem::verdict::replayed);
  CHECK(idem::grpc_answer(replayed, context, repeat).ok());
  CHECK(repeat.SerializeAsString() == first.SerializeAsString());
  ChargeReply second;
  CHECK(idem::grpc_answer(charges("acct-1", "k-2", guarded), context, second).ok());
  CHECK(second.number() == 2);  // the first key's row was committed with its record
}
