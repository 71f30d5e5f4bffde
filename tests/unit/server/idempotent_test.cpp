// idempotent beyond the store contract: fingerprints, keys, options, codecs and the context a
// handler gets. The semantics table itself is in the conformance suite (locked_store_test.cpp).
#include <catch2/catch.hpp>

#include <idem/idem.hpp>

#include "support/forwarding_store.hpp"

#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace idempotent_test {

using namespace std::chrono_literals;

namespace {

struct test_policies : idem::default_policies {
  using clock = idem::manual_clock;
};

struct json_policies : test_policies {
  using fingerprint = idem::canonical_json<>;
};

struct sha_policies : test_policies {
  using fingerprint = idem::sha256;
};

struct optional_key_policies : test_policies {
  static constexpr bool require_key = false;
};

idem::http_request post(std::string body, std::string target = "/charges") {
  return idem::http_request{"POST", std::move(target), {}, std::move(body)};
}

struct echo {
  int* runs;
  idem::http_response operator()(idem::handler_context&, const idem::http_request& request) const {
    ++*runs;
    return idem::http_response{200, {}, request.body};
  }
};

}  // namespace

TEST_CASE("a handler that takes only the request is guarded too", "[idempotent]") {
  int runs = 0;
  idem::idempotent<std::function<std::string(const std::string&)>, test_policies> guarded{
      [&](const std::string& body) {
        ++runs;
        return "saw " + body;
      }};
  CHECK(guarded("s", "k", std::string("x")).value() == "saw x");
  const auto again = guarded("s", "k", std::string("x"));
  CHECK(again.verdict() == idem::verdict::replayed);
  CHECK(again.value() == "saw x");
  CHECK(again.http_status() == 200);
  CHECK(runs == 1);
}

TEST_CASE("without a required key a request runs unguarded and is not stored", "[idempotent]") {
  int runs = 0;
  idem::idempotent<echo, optional_key_policies> guarded{echo{&runs}};
  const auto first = guarded("s", std::nullopt, post("a"));
  const auto second = guarded("s", std::nullopt, post("a"));
  CHECK(first.verdict() == idem::verdict::executed);
  CHECK(second.verdict() == idem::verdict::executed);
  CHECK_FALSE(first.recorded());
  CHECK(runs == 2);
  CHECK(guarded.store().statistics().records == 0);
}

TEST_CASE("the key length limit is configurable", "[idempotent]") {
  int runs = 0;
  idem::idempotent<echo, test_policies>::options options;
  options.max_key_length = 16;
  idem::idempotent<echo, test_policies> guarded{echo{&runs}, options};
  CHECK(guarded("s", std::string(16, 'k'), post("a")).verdict() == idem::verdict::executed);
  const auto refused = guarded("s", std::string(17, 'k'), post("a"));
  CHECK(refused.verdict() == idem::verdict::invalid_key);
  CHECK_THAT(std::string(refused.message()), Catch::Matchers::Contains("1 to 16 bytes"));
}

TEST_CASE("options that cannot work are refused at construction", "[idempotent]") {
  int runs = 0;
  using guarded_type = idem::idempotent<echo, test_policies>;
  auto build = [&](auto change) {
    guarded_type::options options;
    change(options);
    guarded_type guarded{echo{&runs}, options};
  };
  CHECK_THROWS_AS(build([](auto& o) { o.lease = 0s; }), std::invalid_argument);
  CHECK_THROWS_AS(build([](auto& o) { o.retention = o.lease; }), std::invalid_argument);
  CHECK_THROWS_AS(build([](auto& o) { o.coalesce = -1s; }), std::invalid_argument);
  CHECK_THROWS_AS(build([](auto& o) { o.max_key_length = 0; }), std::invalid_argument);
  CHECK_NOTHROW(build([](auto&) {}));
}

TEST_CASE("a JSON body is the same request whatever its member order and whitespace",
          "[idempotent][fingerprint]") {
  int runs = 0;
  idem::idempotent<echo, json_policies> guarded{echo{&runs}};
  REQUIRE(guarded("s", "k", post(R"({"amount":100,"currency":"eur"})")).verdict() ==
          idem::verdict::executed);
  const auto reordered = guarded("s", "k", post("{ \"currency\" : \"eur\",\n \"amount\" : 1e2 }"));
  CHECK(reordered.verdict() == idem::verdict::replayed);
  // The replay is the stored response, not the new body.
  CHECK(reordered->body == R"({"amount":100,"currency":"eur"})");
  CHECK(guarded("s", "k", post(R"({"amount":101,"currency":"eur"})")).verdict() ==
        idem::verdict::mismatch);
  CHECK(runs == 1);
}

TEST_CASE("a body that is not JSON is refused with 400 and claims nothing",
          "[idempotent][fingerprint]") {
  int runs = 0;
  idem::idempotent<echo, json_policies> guarded{echo{&runs}};
  const auto refused = guarded("s", "k", post(R"({"amount":100,})"));
  CHECK(refused.verdict() == idem::verdict::invalid_request);
  CHECK(refused.http_status() == 400);
  CHECK_FALSE(refused.message().empty());
  CHECK(guarded.store().statistics().records == 0);
  CHECK(runs == 0);
  // The key is still free for the corrected request.
  CHECK(guarded("s", "k", post(R"({"amount":100})")).verdict() == idem::verdict::executed);
}

TEST_CASE("excluded JSON members do not count: a webhook redelivered with a new timestamp",
          "[idempotent][fingerprint]") {
  int runs = 0;
  idem::idempotent<echo, json_policies>::options options;
  options.fingerprint.excluded = {"/delivered_at"};
  idem::idempotent<echo, json_policies> guarded{echo{&runs}, options};
  REQUIRE(
      guarded("hooks", "evt_1", post(R"({"id":"evt_1","delivered_at":1700000000})")).verdict() ==
      idem::verdict::executed);
  CHECK(guarded("hooks", "evt_1", post(R"({"delivered_at":1700000060,"id":"evt_1"})")).verdict() ==
        idem::verdict::replayed);
  CHECK(guarded("hooks", "evt_1", post(R"({"id":"evt_2","delivered_at":1700000000})")).verdict() ==
        idem::verdict::mismatch);
}

TEST_CASE("a fingerprint covers the chosen headers, by case-insensitive name", "[fingerprint]") {
  idem::request_fingerprint<idem::xxh3_128> with_version{{"X-Api-Version"}};
  idem::http_request a{"POST", "/charges", {{"x-api-version", "2024-01"}, {"date", "Mon"}}, "b"};
  idem::http_request b = a;
  b.headers[1].second = "Tue";  // not chosen: does not count
  CHECK(with_version(a.view()) == with_version(b.view()));
  b.headers[0].second = "2025-01";
  CHECK(with_version(a.view()) != with_version(b.view()));
  // Absent differs from present-but-empty.
  idem::http_request absent{"POST", "/charges", {}, "b"};
  idem::http_request empty{"POST", "/charges", {{"X-API-VERSION", ""}}, "b"};
  CHECK(with_version(absent.view()) != with_version(empty.view()));
  // A view over a header array works the same way.
  const idem::header_field fields[] = {{"X-Api-Version", "2024-01"}};
  const idem::request_view view{"POST", "/charges", "b", fields};
  CHECK(with_version(view) == with_version(a.view()));
}

TEST_CASE("fingerprint parts are framed, so bytes cannot move between them", "[fingerprint]") {
  const idem::request_fingerprint<idem::xxh3_128> fingerprint;
  const idem::digest one = fingerprint({"POST", "/ab", "c"});
  const idem::digest two = fingerprint({"POST", "/a", "bc"});
  const idem::digest three = fingerprint({"POST/", "ab", "c"});
  CHECK(one != two);
  CHECK(one != three);
  CHECK(two != three);
  CHECK(one.size() == 16);
  CHECK(idem::request_fingerprint<idem::sha256>{}({"POST", "/ab", "c"}).size() == 32);
}

TEST_CASE("the fingerprint of a request never changes: it is persisted", "[fingerprint]") {
  // Pinned digests, computed independently (libxxhash's XXH3_128bits and Python's hashlib over
  // "idem fingerprint v1" then each part as a 64-bit little-endian length and its bytes). A
  // change here would turn every stored record into a mismatch.
  const idem::request_view request{"POST", "/charges", R"({"amount":100})"};
  CHECK(idem::request_fingerprint<idem::xxh3_128>{}(request).hex() ==
        "3f91614d3c646729e3701c88d3a7df84");
  CHECK(idem::request_fingerprint<idem::sha256>{}(request).hex() ==
        "c0daffc8eb7f6de2cc123c5b2f477ff0a243fbe5e8904682e81c9972cfb8fbbc");
  // Downstream keys are persisted by the systems they are sent to: pinned too (hashlib over
  // "idem downstream key v1" then each of scope, key, name as a varint length and its bytes).
  CHECK(idem::handler_context("tenant", "order-1", 1).downstream_key("charge").view() ==
        "96dbf0b282cd0fded2e4ed97e4f3aef3400d56a6c1d3847cbf5b59dfdf6a7510");
}

TEST_CASE("a request hashed in one call has the digest streaming gives it", "[fingerprint]") {
  // Header-less requests are hashed in one call: SHA-256's when they fit 1 KiB framed, XXH3's
  // when the framing before the body does (the body is read in place, whatever its length);
  // others are streamed. The digest must not depend on which, on either side of each limit.
  const auto streamed = [](auto hash, const idem::request_view& request) {
    typename decltype(hash)::state state;
    state.update(std::string_view{"idem fingerprint v1"});
    idem::detail::hash_part(state, request.method);
    idem::detail::hash_part(state, request.target);
    idem::detail::hash_part(state, request.body);
    return state.finish();
  };
  std::string body;
  for (std::size_t size = 0; size <= 1100; ++size) {
    const idem::request_view request{"POST", "/charges", body};
    REQUIRE(idem::request_fingerprint<idem::xxh3_128>{}(request) ==
            streamed(idem::xxh3_128{}, request));
    REQUIRE(idem::request_fingerprint<idem::sha256>{}(request) ==
            streamed(idem::sha256{}, request));
    body.push_back(static_cast<char>('a' + size % 26));
  }
  // Framing before the body of 63 to 65 bytes (the join inside the first stripe or on its
  // end), of 1,024 (the most that is framed on the stack) and of 1,025 (streamed), each with
  // bodies across the short and long inputs' boundary and much longer.
  constexpr std::size_t framing = 19 + 3 * 8 + 4;  // tag, three lengths, "POST"
  for (const std::size_t before_body : {63, 64, 65, 1023, 1024, 1025}) {
    const std::string target(before_body - framing, '/');
    for (const std::size_t size : {0, 1, 63, 64, 65, 177, 240, 241, 256, 1000, 5000, 70000}) {
      const std::string long_body(size, 'b');
      const idem::request_view request{"POST", target, long_body};
      INFO(before_body << " bytes before a body of " << size);
      REQUIRE(idem::request_fingerprint<idem::xxh3_128>{}(request) ==
              streamed(idem::xxh3_128{}, request));
      REQUIRE(idem::request_fingerprint<idem::sha256>{}(request) ==
              streamed(idem::sha256{}, request));
    }
  }
}

TEST_CASE("a SHA-256 fingerprint guards like the default one", "[idempotent][fingerprint]") {
  int runs = 0;
  idem::idempotent<echo, sha_policies> guarded{echo{&runs}};
  REQUIRE(guarded("s", "k", post("a")).verdict() == idem::verdict::executed);
  CHECK(guarded("s", "k", post("a")).verdict() == idem::verdict::replayed);
  CHECK(guarded("s", "k", post("b")).verdict() == idem::verdict::mismatch);
  const auto found = guarded.store().find("s", "k", guarded.clock().wall_now());
  REQUIRE(found);
  CHECK(found->fingerprint.size() == 32);
}

TEST_CASE("downstream keys are stable per scope, key and name, and valid keys themselves",
          "[context]") {
  const idem::handler_context first("tenant", "order-1", 1);
  const idem::handler_context takeover("tenant", "order-1", 2);
  CHECK(first.downstream_key("charge") == takeover.downstream_key("charge"));
  std::set<std::string> distinct;
  for (const auto& [scope, key, name] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"tenant", "order-1", "charge"},
           {"tenant", "order-1", "refund"},
           {"tenant", "order-2", "charge"},
           {"other", "order-1", "charge"},
           {"tenant", "order-1charge", ""},
           {"tenantorder-1", "", "charge"}}) {
    const idem::handler_context context(scope, key, 1);
    const idem::key_buffer derived = context.downstream_key(name);
    CHECK(idem::is_valid_key(derived.view()));
    CHECK(derived.size() == 64);
    distinct.insert(std::string(derived.view()));
  }
  CHECK(distinct.size() == 6);
}

TEST_CASE("a recorded step returns its result without running again", "[context]") {
  idem::handler_context context("s", "k");
  int charges = 0;
  auto charge = [&] {
    ++charges;
    return std::string("ch_42");
  };
  CHECK(context.step("charge", charge) == "ch_42");
  CHECK(context.step("charge", charge) == "ch_42");
  CHECK(charges == 1);
  CHECK(context.step("count", [] { return 7; }) == 7);
  CHECK(context.step("count", [] { return 8; }) == 7);
  CHECK(context.steps_recorded() == 2);
}

TEST_CASE("a step that throws records nothing and runs again", "[context]") {
  idem::handler_context context("s", "k");
  int tries = 0;
  auto flaky = [&] {
    if (++tries == 1) throw std::runtime_error("provider timeout");
    return tries;
  };
  CHECK_THROWS_AS(context.step("charge", flaky), std::runtime_error);
  CHECK(context.step("charge", flaky) == 2);
  CHECK(context.steps_recorded() == 1);
}

TEST_CASE("responses round-trip through their codecs exactly", "[codec]") {
  const idem::http_response response{
      503, {{"Retry-After", "5"}, {"x-empty", ""}}, std::string("body\0with nul", 13)};
  CHECK(idem::decode<idem::http_response>(idem::encode(response)) == response);
  const std::vector<std::byte> bytes{std::byte{0}, std::byte{255}, std::byte{10}};
  CHECK(idem::decode<std::vector<std::byte>>(idem::encode(bytes)) == bytes);
  CHECK(idem::decode<std::int64_t>(idem::encode(std::int64_t{-42})) == -42);
  CHECK(idem::decode<double>(idem::encode(0.1)) == 0.1);
  CHECK(idem::decode<bool>(idem::encode(true)));
}

TEST_CASE("damaged stored bytes are a codec_error, never a wrong response", "[codec]") {
  std::string bytes = idem::encode(idem::http_response{200, {{"a", "b"}}, "body"});
  CHECK_THROWS_AS(idem::decode<idem::http_response>(bytes.substr(0, 4)), idem::codec_error);
  CHECK_THROWS_AS(idem::decode<idem::http_response>("not a response"), idem::codec_error);
  CHECK_THROWS_AS(idem::decode<idem::http_response>(std::string("H\x01\xc8\x01\xff\xff\xff", 7)),
                  idem::codec_error);
  CHECK_THROWS_AS(idem::decode<std::int32_t>("abc"), idem::codec_error);
  CHECK_THROWS_AS(idem::decode<std::monostate>("x"), idem::codec_error);
}

// Found by tests/fuzz/codec_fuzz.cpp (seed corpus/codec/bool_two): reading a byte of 2 as a bool
// was undefined behaviour (UBSan: "load of value 2, which is not a valid value for type bool").
TEST_CASE("a stored byte other than 0 or 1 is a codec_error, not a bool", "[codec]") {
  CHECK_THROWS_AS(idem::decode<bool>(std::string(1, '\x02')), idem::codec_error);
  CHECK_THROWS_AS(idem::decode<bool>(std::string(1, '\xff')), idem::codec_error);
  CHECK(idem::decode<bool>(std::string(1, '\x01')));
  CHECK_FALSE(idem::decode<bool>(std::string(1, '\0')));
}

TEST_CASE("every verdict maps to its HTTP status", "[verdict]") {
  using idem::verdict;
  CHECK(idem::http_status(verdict::in_progress) == 409);
  CHECK(idem::http_status(verdict::mismatch) == 422);
  CHECK(idem::http_status(verdict::missing_key) == 400);
  CHECK(idem::http_status(verdict::invalid_key) == 400);
  CHECK(idem::http_status(verdict::invalid_request) == 400);
  CHECK(idem::http_status(verdict::body_too_large) == 413);
  CHECK(idem::http_status(verdict::store_unavailable) == 503);
  CHECK(idem::http_status(verdict::store_full) == 503);
  CHECK(to_string(verdict::store_full) == "store_full");
  const idem::idempotent_outcome<std::string> conflict{verdict::in_progress, "busy"};
  CHECK(conflict.http_status() == 409);
  CHECK_THROWS_AS(conflict.value(), idem::no_response_error);
}

TEST_CASE("a damaged stored response is reported as an error, not replayed", "[idempotent]") {
  int runs = 0;
  idem::idempotent<echo, test_policies> guarded{echo{&runs}};
  const idem::digest print = guarded.fingerprint()(post("a").view());
  auto store = guarded.store();
  const auto now = guarded.clock().wall_now();
  const auto claimed = store.claim({"s", "k", print, now, 30s, 24h});
  REQUIRE(store.complete({"s", "k", claimed.fence}, "garbage", now));
  CHECK_THROWS_AS(guarded("s", "k", post("a")), idem::codec_error);
  CHECK(runs == 0);
}

TEST_CASE("the key is read from the Idempotency-Key header: absent is missing, empty invalid",
          "[idempotent]") {
  int runs = 0;
  idem::idempotent<echo, test_policies> guarded{echo{&runs}};
  idem::http_request request{"POST", "/charges", {{"idempotency-key", "abc"}}, "a"};
  CHECK(guarded("s", request).verdict() == idem::verdict::executed);
  CHECK(guarded("s", request).verdict() == idem::verdict::replayed);
  CHECK(guarded.store().find("s", "abc", guarded.clock().wall_now()));
  request.headers.clear();
  CHECK(guarded("s", request).verdict() == idem::verdict::missing_key);
  request.headers = {{"Idempotency-Key", ""}};
  CHECK(guarded("s", request).verdict() == idem::verdict::invalid_key);
  CHECK(runs == 1);

  idem::idempotent<echo, test_policies>::options options;
  options.key_header = "X-Request-Id";
  idem::idempotent<echo, test_policies> custom{echo{&runs}, options};
  const idem::http_request tagged{"POST", "/charges", {{"x-request-id", "r-1"}}, "a"};
  CHECK(custom("s", tagged).verdict() == idem::verdict::executed);
  CHECK(custom.store().find("s", "r-1", custom.clock().wall_now()));
}

TEST_CASE("a body over max_body_bytes is refused with 413 before anything is claimed",
          "[idempotent]") {
  int runs = 0;
  idem::idempotent<echo, test_policies>::options options;
  options.max_body_bytes = 16;
  idem::idempotent<echo, test_policies> guarded{echo{&runs}, options};
  const auto refused = guarded("s", "k", post(std::string(17, 'b')));
  CHECK(refused.verdict() == idem::verdict::body_too_large);
  CHECK(refused.http_status() == 413);
  CHECK_THAT(std::string(refused.message()), Catch::Matchers::Contains("at most 16"));
  CHECK(guarded.store().statistics().records == 0);
  CHECK(runs == 0);
  // The key is still free, and a body at the limit is accepted.
  CHECK(guarded("s", "k", post(std::string(16, 'b'))).verdict() == idem::verdict::executed);
}

namespace {

// locked_store that remembers the `now` each completion was given, and says through
// reads_completion_time whether it wants the clock's time there.
template <bool Reads>
class completion_time_store : public idem_test::forwarding_store<idem::locked_store> {
 public:
  static constexpr bool reads_completion_time = Reads;

  bool complete(const idem::fenced_key& held, std::string_view response, idem::store_time now) {
    completed_at_->push_back(now);
    return inner_.complete(held, response, now);
  }
  const std::vector<idem::store_time>& completed_at() const { return *completed_at_; }

 private:
  std::shared_ptr<std::vector<idem::store_time>> completed_at_ =
      std::make_shared<std::vector<idem::store_time>>();
};

template <bool Reads>
struct completion_time_policies : test_policies {
  using store = completion_time_store<Reads>;
};

template <bool Reads>
std::vector<idem::store_time> completion_times_of_a_slow_handler() {
  using guarded_type =
      idem::idempotent<std::function<std::string(idem::handler_context&, const std::string&)>,
                       completion_time_policies<Reads>>;
  idem::manual_clock clock;
  typename guarded_type::options options;
  options.clock = clock;
  guarded_type guarded{[&](idem::handler_context&, const std::string& body) {
                         clock.advance(7s);  // the handler takes 7 s
                         return body;
                       },
                       options};
  const auto start = clock.wall_now();
  REQUIRE(guarded("s", "k", std::string("x")).verdict() == idem::verdict::executed);
  auto times = guarded.store().completed_at();
  for (auto& each : times)
    each -= start.time_since_epoch();
  return times;
}

}  // namespace

TEST_CASE("a completion gets the clock's time unless the store says it does not read it",
          "[idempotent]") {
  STATIC_REQUIRE(idem::reads_completion_time<completion_time_store<true>>);
  STATIC_REQUIRE_FALSE(idem::reads_completion_time<completion_time_store<false>>);
  // A store that does not say reads it; every store idem provides says it does not.
  struct says_nothing {};
  STATIC_REQUIRE(idem::reads_completion_time<says_nothing>);
  STATIC_REQUIRE_FALSE(idem::reads_completion_time<idem::memory_store>);
  STATIC_REQUIRE_FALSE(idem::reads_completion_time<idem::locked_store>);

  // The store that reads it is given the time after the handler ran; the other the claim's
  // time, read once.
  CHECK(completion_times_of_a_slow_handler<true>() ==
        std::vector<idem::store_time>{idem::store_time{} + 7s});
  CHECK(completion_times_of_a_slow_handler<false>() ==
        std::vector<idem::store_time>{idem::store_time{}});
}

namespace {

// locked_store that counts the recovery points written, and can refuse releases: a handler that
// throws then leaves its claim in progress, as a process that died would.
class step_counting_store : public idem_test::forwarding_store<idem::locked_store> {
 public:
  struct counts {
    int checkpoints = 0;
    bool refuse_release = false;
  };

  bool checkpoint(const idem::fenced_key& held, std::string_view recovery,
                  idem::store_time lease_until) {
    ++counts_->checkpoints;
    return inner_.checkpoint(held, recovery, lease_until);
  }
  bool release(const idem::fenced_key& held) {
    if (counts_->refuse_release) {
      throw idem::store_error(idem::store_failure::unavailable, "the release was refused");
    }
    return inner_.release(held);
  }
  counts& tally() const { return *counts_; }

 private:
  std::shared_ptr<counts> counts_ = std::make_shared<counts>();
};

struct step_counting_policies : test_policies {
  using store = step_counting_store;
};

using stepping_guard =
    idem::idempotent<std::function<std::string(idem::handler_context&, const std::string&)>,
                     step_counting_policies>;

}  // namespace

TEST_CASE(
    "a step with_next_write costs one fenced write, and its result rides on the claim's next "
    "write",
    "[context][with_next_write]") {
  idem::manual_clock clock;
  stepping_guard::options options;
  options.clock = clock;
  int charges = 0;
  std::string charged_under;
  bool crash_before_next_write = false;
  bool crash_after_next_write = false;
  stepping_guard guarded{[&](idem::handler_context& ctx, const std::string&) {
                           const std::string charge = ctx.step(
                               "charge",
                               [&] {
                                 ++charges;
                                 charged_under = std::string(ctx.downstream_key("charge").view());
                                 return std::string("ch_") + std::to_string(charges);
                               },
                               idem::with_next_write);
                           if (crash_before_next_write) throw std::runtime_error("died");
                           ctx.step("receipt", [] { return 1; });  // writes the charge too
                           if (crash_after_next_write) throw std::runtime_error("died");
                           return charge;
                         },
                         options};
  step_counting_store::counts& tally = guarded.store().tally();

  SECTION("on the common path: its start, then the next step's two writes") {
    const auto done = guarded("s", "k", std::string("x"));
    REQUIRE(done.verdict() == idem::verdict::executed);
    CHECK(*done == "ch_1");
    CHECK(tally.checkpoints == 3);
    CHECK(guarded("s", "k", std::string("x")).verdict() == idem::verdict::replayed);
    CHECK(charges == 1);
  }
  SECTION("a takeover after the next write resumes from the kept result") {
    crash_after_next_write = true;
    tally.refuse_release = true;
    CHECK_THROWS_AS(guarded("s", "k", std::string("x")), std::runtime_error);
    crash_after_next_write = false;
    clock.advance(31s);  // past the lease
    const auto resumed = guarded("s", "k", std::string("x"));
    REQUIRE(resumed.verdict() == idem::verdict::executed);
    CHECK(resumed.resumed());
    CHECK(*resumed == "ch_1");
    CHECK(charges == 1);
  }
  SECTION("a takeover before any later write runs the step again under the same key") {
    crash_before_next_write = true;
    tally.refuse_release = true;
    CHECK_THROWS_AS(guarded("s", "k", std::string("x")), std::runtime_error);
    CHECK(tally.checkpoints == 1);  // the step's start alone
    const std::string first_key = charged_under;
    crash_before_next_write = false;
    clock.advance(31s);
    const auto resumed = guarded("s", "k", std::string("x"));
    REQUIRE(resumed.verdict() == idem::verdict::executed);
    CHECK(resumed.resumed());
    CHECK(charges == 2);  // the downstream, keyed, answers its first charge again
    CHECK(charged_under == first_key);
  }
}

TEST_CASE("a step with_next_write returns a recorded result, and counts as recorded",
          "[context][with_next_write]") {
  idem::handler_context context("s", "k");
  int charges = 0;
  auto charge = [&] {
    ++charges;
    return std::string("ch_42");
  };
  CHECK(context.step("charge", charge, idem::with_next_write) == "ch_42");
  CHECK(context.step("charge", charge, idem::with_next_write) == "ch_42");
  CHECK(context.step("charge", charge) == "ch_42");
  CHECK(charges == 1);
  CHECK(context.steps_recorded() == 1);
}

}  // namespace idempotent_test
