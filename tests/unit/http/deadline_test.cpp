// The caller's deadline: the Request-Timeout-Ms field read and written (idem/http/deadline.hpp),
// and what a wrapper does with it (idem::caller_deadline): refuse what cannot finish, nothing
// claimed, and hand the rest to the handler.
#include <catch2/catch.hpp>

#include <idem/core/clock.hpp>
#include <idem/http.hpp>
#include <idem/policies.hpp>
#include <idem/server/idempotent.hpp>
#include <idem/store/memory.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deadline_test {

namespace http = idem::http;
using namespace std::chrono_literals;

namespace {

std::chrono::nanoseconds left_of(std::string_view value) {
  const http::parsed_deadline parsed = http::parse_deadline(value);
  REQUIRE(parsed);
  REQUIRE(parsed.deadline());
  return parsed.deadline()->time_left;
}

http::deadline_error error_of(std::string_view value) {
  return http::parse_deadline(value).error();
}

struct clocked_policies : idem::default_policies {
  using clock = idem::manual_clock;
};

/// A handler that notes the time its caller has left as it starts, and after `work` passes on
/// the wrapper's clock.
struct timed_handler {
  idem::manual_clock clock;
  std::chrono::nanoseconds work{0};
  std::shared_ptr<int> runs = std::make_shared<int>(0);
  std::shared_ptr<std::vector<std::optional<std::chrono::nanoseconds>>> seen =
      std::make_shared<std::vector<std::optional<std::chrono::nanoseconds>>>();

  idem::http_response operator()(idem::handler_context& ctx, const idem::http_request&) const {
    ++*runs;
    seen->push_back(ctx.time_left());
    auto worker = clock;  // copies share the time
    worker.advance(work);
    seen->push_back(ctx.time_left());
    return {201, {{"Content-Type", "text/plain"}}, "done"};
  }
};

struct deadline_service {
  idem::manual_clock clock;
  timed_handler handler{clock};
  std::unique_ptr<idem::idempotent<timed_handler, clocked_policies>> guarded;
  http::specification spec;

  explicit deadline_service(std::chrono::nanoseconds minimum = 0ns) {
    idem::idempotent<timed_handler, clocked_policies>::options parts;
    parts.clock = clock;
    parts.minimum_time_left = minimum;
    guarded = std::make_unique<idem::idempotent<timed_handler, clocked_policies>>(handler,
                                                                                  std::move(parts));
    spec = http::specification::of(*guarded);
  }

  http::reply post(std::vector<std::pair<std::string, std::string>> headers) {
    const idem::http_request request{"POST", "/work", std::move(headers), "{}"};
    http::reply answer;
    http::exchange(*guarded, "client", http::field_values_in(request), request, spec, answer);
    return answer;
  }
  int runs() const { return *handler.runs; }
};

bool is_problem(const http::reply& answer, std::string_view fragment) {
  return answer.content_type == http::problem_media_type &&
         answer.body.find("#" + std::string(fragment) + "\"") != std::string::npos;
}

}  // namespace

TEST_CASE("a Request-Timeout-Ms value is the milliseconds the caller still waits") {
  CHECK(left_of("2500") == 2500ms);
  CHECK(left_of(" \t10 ") == 10ms);
  CHECK(left_of("0") == 0ms);
  CHECK(left_of("007") == 7ms);
  CHECK(left_of("999999999") == 999'999'999ms);
}

TEST_CASE(
    "a deadline that is empty, negative, not a number or too long is refused, never guessed") {
  CHECK(error_of("") == http::deadline_error::empty);
  CHECK(error_of("  ") == http::deadline_error::empty);
  CHECK(error_of("-5") == http::deadline_error::negative);
  CHECK(error_of("-0") == http::deadline_error::negative);
  for (const std::string_view wrong :
       {"+5", "1.5", "1e3", "abc", "1 2", "0x10", "5ms", "\xc2\xb2"}) {
    CAPTURE(wrong);
    CHECK(error_of(wrong) == http::deadline_error::not_a_number);
  }
  CHECK(error_of("1000000000") == http::deadline_error::too_large);
  CHECK(error_of("99999999999999999999999") == http::deadline_error::too_large);
  CHECK(error_of("5, 6") == http::deadline_error::several_fields);
  // Each refusal says what is wrong.
  for (const auto error : {http::deadline_error::empty, http::deadline_error::negative,
                           http::deadline_error::not_a_number, http::deadline_error::too_large,
                           http::deadline_error::several_fields}) {
    CHECK_FALSE(http::parsed_deadline{error}.message().empty());
  }
}

TEST_CASE("no deadline field is no deadline, and two fields are refused") {
  const std::vector<std::string_view> none;
  const http::parsed_deadline absent = http::parse_deadline_fields(none);
  CHECK(absent);
  CHECK_FALSE(absent.deadline());
  const std::vector<std::string_view> two{"100", "100"};
  CHECK(http::parse_deadline_fields(two).error() == http::deadline_error::several_fields);
}

TEST_CASE("a deadline is written in whole milliseconds, rounded down, 0 when none is left") {
  CHECK(http::format_deadline(2500ms) == "2500");
  CHECK(http::format_deadline(1999us) == "1");
  CHECK(http::format_deadline(999us) == "0");
  CHECK(http::format_deadline(-3s) == "0");
  CHECK(http::format_deadline(std::chrono::hours{24 * 365}) == "999999999");
  // What is written reads back as no more than was left.
  for (const std::chrono::nanoseconds left :
       {std::chrono::nanoseconds{1ms}, std::chrono::nanoseconds{1500us},
        std::chrono::nanoseconds{12345678ns}, std::chrono::nanoseconds{86400s}}) {
    CHECK(left_of(http::format_deadline(left)) <= left);
  }
}

TEST_CASE("a retrying client sends its key and its time left with each attempt") {
  const idem::attempt_context attempt{2, "k-1", 1250ms};
  const http::attempt_field_values bare = http::attempt_fields(attempt);
  CHECK(bare.key == "k-1");
  CHECK(bare.deadline == "1250");
  CHECK(http::attempt_fields(attempt, http::key_form::sf_string).key == "\"k-1\"");
}

TEST_CASE("a request whose caller stopped waiting is refused with 504 and nothing is claimed") {
  deadline_service s;
  const auto late = s.post({{"Idempotency-Key", "k-1"}, {"Request-Timeout-Ms", "0"}});
  CHECK(late.status == 504);
  CHECK(is_problem(late, "deadline-exceeded"));
  CHECK(s.runs() == 0);
  // Nothing was claimed: the key runs when the caller has time.
  CHECK(s.post({{"Idempotency-Key", "k-1"}, {"Request-Timeout-Ms", "500"}}).status == 201);
  CHECK(s.runs() == 1);
}

TEST_CASE("a deadline shorter than the work needs is refused before the work starts") {
  deadline_service s(100ms);
  const auto short_of_time = s.post({{"Idempotency-Key", "k-1"}, {"Request-Timeout-Ms", "99"}});
  CHECK(short_of_time.status == 504);
  CHECK(short_of_time.body.find("needs at least 100 ms") != std::string::npos);
  CHECK(s.post({{"Idempotency-Key", "k-1"}, {"Request-Timeout-Ms", "100"}}).status == 201);
  CHECK(s.runs() == 1);
}

TEST_CASE(
    "a deadline that is not a number of milliseconds is a 400 problem and nothing is claimed") {
  deadline_service s;
  for (const std::string wrong : {"-5", "soon", "1000000000", "1.5", ""}) {
    CAPTURE(wrong);
    const auto refused = s.post({{"Idempotency-Key", "k-1"}, {"Request-Timeout-Ms", wrong}});
    CHECK(refused.status == 400);
    CHECK(is_problem(refused, "invalid-deadline"));
  }
  const auto twice = s.post(
      {{"Idempotency-Key", "k-1"}, {"Request-Timeout-Ms", "100"}, {"Request-Timeout-Ms", "200"}});
  CHECK(twice.status == 400);
  CHECK(s.runs() == 0);
}

TEST_CASE("the handler sees what its caller has left, counting down on the wrapper's clock") {
  deadline_service s;
  s.guarded->handler().work = 300ms;  // the wrapper holds its own copy of the handler
  CHECK(s.post({{"Idempotency-Key", "k-1"}, {"Request-Timeout-Ms", "2000"}}).status == 201);
  REQUIRE(s.handler.seen->size() == 2);
  CHECK((*s.handler.seen)[0] == 2000ms);
  CHECK((*s.handler.seen)[1] == 1700ms);
}

TEST_CASE("a request without a deadline gives the handler none") {
  deadline_service s;
  CHECK(s.post({{"Idempotency-Key", "k-1"}}).status == 201);
  REQUIRE(s.handler.seen->size() == 2);
  CHECK_FALSE((*s.handler.seen)[0]);
}

TEST_CASE("a caller out of time gets 504 even where an answer is stored, and a bad key 400 first") {
  deadline_service s;
  CHECK(s.post({{"Idempotency-Key", "k-1"}}).status == 201);
  // The deadline bounds work not yet started; a stored answer costs none, but the wrapper does
  // not look the key up for a caller it would refuse: the refusal is the same for any key.
  CHECK(s.post({{"Idempotency-Key", "k-1"}, {"Request-Timeout-Ms", "0"}}).status == 504);
  CHECK(s.post({{"Idempotency-Key", "bad key"}, {"Request-Timeout-Ms", "0"}}).status == 400);
  CHECK(s.runs() == 1);
}

}  // namespace deadline_test
