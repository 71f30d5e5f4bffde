// Classifiers: which results are successes, which failures are worth repeating (transient), which
// may already have taken effect (ambiguous), and which no repeat can fix (permanent), by the
// rules of HTTP, errno and gRPC; plus the `fault` flag a circuit breaker counts and the
// Retry-After a failure carries.
#include <catch2/catch.hpp>
#include <idem/idem.hpp>

#include <cerrno>
#include <exception>
#include <ios>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace {

using idem::disposition;

struct response_with_status_member {
  int status = 200;
  std::string retry_after;
};

struct response_with_status_function {
  int code = 200;
  std::optional<std::string> retry_after_header;

  int status() const { return code; }
  std::optional<std::string_view> header(std::string_view name) const {
    if (name == "Retry-After" && retry_after_header) return std::string_view{*retry_after_header};
    return std::nullopt;
  }
};

struct my_transient_error : std::runtime_error {
  my_transient_error() : std::runtime_error("try again") {}
};
struct my_derived_transient_error : my_transient_error {};
struct my_timeout_error : std::runtime_error {
  my_timeout_error() : std::runtime_error("timed out") {}
};
struct my_derived_timeout_error : my_timeout_error {};
// Listed as both: the more cautious verdict, ambiguous, must win.
struct my_transient_timeout_error : my_transient_error, my_timeout_error {};

using my_exception_classifier =
    idem::exception_classifier<idem::exception_types<my_transient_error>,
                               idem::exception_types<my_timeout_error>>;

template <class Exception>
std::exception_ptr thrown(Exception e) {
  return std::make_exception_ptr(e);
}

idem::classification classify_errc(std::errc e) {
  return idem::classify_error_code(std::make_error_code(e));
}

idem::classification classify_grpc(idem::grpc_status s) {
  return idem::classify_error_code(std::error_code{s});
}

}  // namespace

// --- HTTP ----------------------------------------------------------------------------------

TEST_CASE("HTTP 1xx, 2xx and 3xx statuses are successes") {
  for (int status : {100, 200, 201, 202, 204, 301, 302, 304, 399}) {
    CAPTURE(status);
    const auto verdict = idem::classify_http_status(status);
    CHECK(verdict.kind == disposition::success);
    CHECK(verdict.code == status);
    CHECK_FALSE(verdict.fault);
  }
}

TEST_CASE("HTTP 408, 425, 429, 502 and 503 are transient") {
  for (int status : {408, 425, 429, 502, 503}) {
    CAPTURE(status);
    const auto verdict = idem::classify_http_status(status);
    CHECK(verdict.kind == disposition::transient);
    CHECK(verdict.code == status);
  }
  CHECK(idem::classify_http_status(502).fault);
  CHECK(idem::classify_http_status(503).fault);
  // 425 Too Early refuses only the early-data replay: the server itself is healthy.
  CHECK_FALSE(idem::classify_http_status(425).fault);
}

TEST_CASE("HTTP 504 is ambiguous: the upstream may still have acted") {
  const auto verdict = idem::classify_http_status(504);
  CHECK(verdict.kind == disposition::ambiguous);
  CHECK(verdict.code == 504);
  CHECK(verdict.fault);
}

TEST_CASE("other HTTP 4xx statuses are permanent and not the dependency's fault") {
  for (int status : {400, 401, 403, 404, 405, 409, 410, 412, 413, 422, 451, 499}) {
    CAPTURE(status);
    const auto verdict = idem::classify_http_status(status);
    CHECK(verdict.kind == disposition::permanent);
    CHECK(verdict.code == status);
    CHECK_FALSE(verdict.fault);
  }
}

TEST_CASE("HTTP 500 and other 5xx are permanent but count as the dependency's fault") {
  for (int status : {500, 501, 505, 507, 511, 599}) {
    CAPTURE(status);
    const auto verdict = idem::classify_http_status(status);
    CHECK(verdict.kind == disposition::permanent);
    CHECK(verdict.fault);
  }
}

TEST_CASE("a status outside 100..599 is permanent and no fault") {
  for (int status : {-1, 0, 99, 600, 999}) {
    CAPTURE(status);
    CHECK(idem::classify_http_status(status).kind == disposition::permanent);
    CHECK_FALSE(idem::classify_http_status(status).fault);
  }
}

TEST_CASE("http_classifier reads a status member or a status() function") {
  const idem::http_classifier classifier;
  for (int status : {200, 204, 304, 404, 429, 500, 503, 504}) {
    CAPTURE(status);
    const auto expected = idem::classify_http_status(status);
    const auto by_member = classifier.classify(response_with_status_member{status, {}});
    const auto by_function = classifier.classify(response_with_status_function{status, {}});
    CHECK(by_member.kind == expected.kind);
    CHECK(by_member.code == status);
    CHECK(by_member.fault == expected.fault);
    CHECK(by_function.kind == expected.kind);
    CHECK(by_function.code == status);
    CHECK(by_function.fault == expected.fault);
  }
}

TEST_CASE("the default classifier judges an HTTP-like response by the HTTP rules") {
  const idem::default_classifier classifier;
  CHECK(classifier.classify(response_with_status_member{503, {}}).kind == disposition::transient);
  CHECK(classifier.classify(response_with_status_function{404, {}}).kind == disposition::permanent);
  CHECK(classifier.classify(response_with_status_function{504, {}}).kind == disposition::ambiguous);
  CHECK(classifier.classify(response_with_status_member{201, {}}).kind == disposition::success);
}

TEST_CASE("a 409 with Retry-After is the draft's request outstanding, repeated after the wait") {
  const idem::http_classifier classifier;
  const response_with_status_member conflict{409, "2"};  // retry_after points into it
  const auto outstanding = classifier.classify(conflict);
  CHECK(outstanding.kind == disposition::transient);
  CHECK(outstanding.retry_after == "2");
  CHECK_FALSE(outstanding.fault);  // the dependency is alive: it answered what it is doing
  const auto by_header = classifier.classify(response_with_status_function{409, "1"});
  CHECK(by_header.kind == disposition::transient);
  // Without Retry-After it is a conflict of the request itself: never repeated.
  CHECK(classifier.classify(response_with_status_member{409, ""}).kind == disposition::permanent);
  CHECK(idem::default_classifier{}.classify(response_with_status_member{409, "2"}).kind ==
        disposition::transient);
}

TEST_CASE("Retry-After is surfaced from a retry_after member, only for failures") {
  const idem::http_classifier classifier;
  CHECK(classifier.classify(response_with_status_member{503, "120"}).retry_after == "120");
  CHECK(classifier.classify(response_with_status_member{429, "Sun, 06 Nov 1994 08:49:37 GMT"})
            .retry_after == "Sun, 06 Nov 1994 08:49:37 GMT");
  CHECK(classifier.classify(response_with_status_member{200, "120"}).retry_after.empty());
  CHECK(classifier.classify(response_with_status_member{503, ""}).retry_after.empty());
}

TEST_CASE("Retry-After is surfaced from a header(name) lookup, only for failures") {
  const idem::http_classifier classifier;
  const response_with_status_function unavailable{503, "7"};
  CHECK(classifier.classify(unavailable).retry_after == "7");
  const response_with_status_function ok{200, "7"};
  CHECK(classifier.classify(ok).retry_after.empty());
  const response_with_status_function no_header{429, std::nullopt};
  CHECK(classifier.classify(no_header).retry_after.empty());
  // Through the default classifier too.
  CHECK(idem::default_classifier{}.classify(unavailable).retry_after == "7");
}

// --- error codes ---------------------------------------------------------------------------

TEST_CASE("an empty error code is a success") {
  CHECK(idem::classify_error_code(std::error_code{}).kind == disposition::success);
  CHECK(idem::error_code_classifier{}.classify(std::error_code{}).kind == disposition::success);
  CHECK(idem::default_classifier{}.classify(std::error_code{}).kind == disposition::success);
}

TEST_CASE("timeouts and connections lost after sending are ambiguous") {
  for (auto e : {std::errc::timed_out, std::errc::connection_reset, std::errc::connection_aborted,
                 std::errc::broken_pipe, std::errc::network_reset}) {
    CAPTURE(static_cast<int>(e));
    CHECK(classify_errc(e).kind == disposition::ambiguous);
    CHECK(classify_errc(e).fault);
    CHECK(classify_errc(e).code == static_cast<int>(e));
  }
}

TEST_CASE("connections that never reached the dependency are transient") {
  for (auto e :
       {std::errc::connection_refused, std::errc::network_unreachable, std::errc::host_unreachable,
        std::errc::network_down, std::errc::resource_unavailable_try_again}) {
    CAPTURE(static_cast<int>(e));
    CHECK(classify_errc(e).kind == disposition::transient);
    CHECK(classify_errc(e).fault);
  }
}

TEST_CASE("other error codes are permanent and not the dependency's fault") {
  for (auto e : {std::errc::invalid_argument, std::errc::permission_denied,
                 std::errc::no_such_file_or_directory, std::errc::interrupted}) {
    CAPTURE(static_cast<int>(e));
    CHECK(classify_errc(e).kind == disposition::permanent);
    CHECK_FALSE(classify_errc(e).fault);
  }
  // A category the rules do not know at all.
  CHECK(idem::classify_error_code(std::make_error_code(std::io_errc::stream)).kind ==
        disposition::permanent);
}

TEST_CASE("system_category codes are judged by the condition they map to") {
  const auto system = [](int value) {
    return idem::classify_error_code(std::error_code(value, std::system_category()));
  };
  CHECK(system(ETIMEDOUT).kind == disposition::ambiguous);
  CHECK(system(ECONNRESET).kind == disposition::ambiguous);
  CHECK(system(EPIPE).kind == disposition::ambiguous);
  CHECK(system(ECONNREFUSED).kind == disposition::transient);
  CHECK(system(ENETUNREACH).kind == disposition::transient);
  CHECK(system(EINVAL).kind == disposition::permanent);
  CHECK(system(EACCES).kind == disposition::permanent);
  CHECK(system(ETIMEDOUT).code == ETIMEDOUT);
}

TEST_CASE("gRPC UNAVAILABLE, RESOURCE_EXHAUSTED and ABORTED are transient") {
  for (auto s : {idem::grpc_status::unavailable, idem::grpc_status::resource_exhausted,
                 idem::grpc_status::aborted}) {
    CAPTURE(static_cast<int>(s));
    CHECK(classify_grpc(s).kind == disposition::transient);
    CHECK(classify_grpc(s).fault);
    CHECK(classify_grpc(s).code == static_cast<int>(s));
  }
}

TEST_CASE("gRPC DEADLINE_EXCEEDED is ambiguous") {
  CHECK(classify_grpc(idem::grpc_status::deadline_exceeded).kind == disposition::ambiguous);
  CHECK(classify_grpc(idem::grpc_status::deadline_exceeded).fault);
}

TEST_CASE("other gRPC codes are permanent, and INTERNAL, UNKNOWN and DATA_LOSS are faults") {
  for (auto s : {idem::grpc_status::invalid_argument, idem::grpc_status::not_found,
                 idem::grpc_status::already_exists, idem::grpc_status::permission_denied,
                 idem::grpc_status::failed_precondition, idem::grpc_status::unauthenticated,
                 idem::grpc_status::cancelled}) {
    CAPTURE(static_cast<int>(s));
    CHECK(classify_grpc(s).kind == disposition::permanent);
    CHECK_FALSE(classify_grpc(s).fault);
  }
  for (auto s :
       {idem::grpc_status::internal, idem::grpc_status::unknown, idem::grpc_status::data_loss}) {
    CAPTURE(static_cast<int>(s));
    CHECK(classify_grpc(s).kind == disposition::permanent);
    CHECK(classify_grpc(s).fault);
  }
  CHECK(classify_grpc(idem::grpc_status::ok).kind == disposition::success);
}

TEST_CASE("a gRPC code is judged by the gRPC rules, never as the errno of the same number") {
  // DEADLINE_EXCEEDED is 4, as is EINTR; UNAVAILABLE is 14, as is EFAULT.
  CHECK(classify_grpc(idem::grpc_status::deadline_exceeded).kind == disposition::ambiguous);
  CHECK(idem::classify_error_code(std::error_code(4, std::generic_category())).kind ==
        disposition::permanent);
  CHECK(classify_grpc(idem::grpc_status::unavailable).kind == disposition::transient);
  CHECK(idem::classify_error_code(std::error_code(14, std::generic_category())).kind ==
        disposition::permanent);
  // ETIMEDOUT's number as a gRPC code is no gRPC status at all.
  CHECK(idem::classify_error_code(std::error_code(ETIMEDOUT, idem::grpc_category())).kind ==
        disposition::permanent);
}

TEST_CASE("gRPC status enums are error codes of the grpc category") {
  const std::error_code code = idem::grpc_status::unavailable;
  CHECK(std::string{code.category().name()} == "grpc");
  CHECK(code.message() == "UNAVAILABLE");
  CHECK(code.value() == 14);
  CHECK(std::error_code{idem::grpc_status::deadline_exceeded}.message() == "DEADLINE_EXCEEDED");
  CHECK(std::error_code{idem::grpc_status::unauthenticated}.message() == "UNAUTHENTICATED");
  CHECK_FALSE(std::error_code{idem::grpc_status::ok});
  CHECK_THAT(idem::grpc_category().message(17), Catch::Contains("17"));
  CHECK_THAT(idem::grpc_category().message(-1), Catch::Contains("-1"));
}

TEST_CASE("error_code_classifier and default_classifier take gRPC status enums directly") {
  CHECK(idem::error_code_classifier{}.classify(idem::grpc_status::unavailable).kind ==
        disposition::transient);
  CHECK(idem::error_code_classifier{}.classify(std::make_error_code(std::errc::timed_out)).kind ==
        disposition::ambiguous);
  CHECK(idem::default_classifier{}.classify(idem::grpc_status::deadline_exceeded).kind ==
        disposition::ambiguous);
  CHECK(idem::default_classifier{}.classify(idem::grpc_status::not_found).kind ==
        disposition::permanent);
}

// --- exceptions ----------------------------------------------------------------------------

TEST_CASE("a std::system_error is judged by its code") {
  const idem::default_classifier classifier;
  const auto timed_out = thrown(std::system_error(std::make_error_code(std::errc::timed_out)));
  CHECK(classifier.classify_exception(timed_out).kind == disposition::ambiguous);
  const auto refused = thrown(std::system_error(ECONNREFUSED, std::system_category()));
  CHECK(classifier.classify_exception(refused).kind == disposition::transient);
  const auto grpc = thrown(std::system_error(idem::grpc_status::resource_exhausted));
  CHECK(classifier.classify_exception(grpc).kind == disposition::transient);
  const auto denied = thrown(std::system_error(std::make_error_code(std::errc::permission_denied)));
  CHECK(classifier.classify_exception(denied).kind == disposition::permanent);
  // Every provided classifier knows std::system_error.
  CHECK(idem::http_classifier{}.classify_exception(timed_out).kind == disposition::ambiguous);
  CHECK(idem::error_code_classifier{}.classify_exception(timed_out).kind == disposition::ambiguous);
  CHECK(my_exception_classifier{}.classify_exception(timed_out).kind == disposition::ambiguous);
}

TEST_CASE("any other exception is permanent and no fault under the default classifier") {
  const idem::default_classifier classifier;
  for (const auto& error : {thrown(std::runtime_error("boom")), thrown(std::logic_error("bug")),
                            thrown(my_transient_error{}), thrown(42)}) {
    CHECK(classifier.classify_exception(error).kind == disposition::permanent);
    CHECK_FALSE(classifier.classify_exception(error).fault);
  }
}

TEST_CASE("exception_classifier repeats the listed exception types and types derived from them") {
  const my_exception_classifier classifier;
  CHECK(classifier.classify_exception(thrown(my_transient_error{})).kind == disposition::transient);
  CHECK(classifier.classify_exception(thrown(my_derived_transient_error{})).kind ==
        disposition::transient);
  CHECK(classifier.classify_exception(thrown(my_timeout_error{})).kind == disposition::ambiguous);
  CHECK(classifier.classify_exception(thrown(my_derived_timeout_error{})).kind ==
        disposition::ambiguous);
  CHECK(classifier.classify_exception(thrown(my_transient_error{})).fault);
  // Unlisted types stay permanent, even a base of a listed one.
  CHECK(classifier.classify_exception(thrown(std::runtime_error("boom"))).kind ==
        disposition::permanent);
  CHECK(classifier.classify_exception(thrown(42)).kind == disposition::permanent);
}

TEST_CASE("an exception listed as both transient and ambiguous is ambiguous") {
  const my_exception_classifier classifier;
  CHECK(classifier.classify_exception(thrown(my_transient_timeout_error{})).kind ==
        disposition::ambiguous);
}

TEST_CASE("exception_classifier takes every returned value for a success") {
  const my_exception_classifier classifier;
  CHECK(classifier.classify(503).kind == disposition::success);
  CHECK(classifier.classify(response_with_status_member{503, {}}).kind == disposition::success);
}

// --- user rules ----------------------------------------------------------------------------

namespace {

/// A user's rules: 500 is worth repeating for this dependency; failures throw only my_timeout.
struct retry_500_rules {
  idem::classification operator()(int status) const {
    if (status == 500) return {disposition::transient, 500, true, {}};
    return idem::classify_http_status(status);
  }
  idem::classification operator()(const std::exception_ptr& error) const {
    try {
      std::rethrow_exception(error);
    } catch (const my_timeout_error&) {
      return {disposition::ambiguous, 0, true, {}};
    } catch (...) {
    }
    return {disposition::permanent, 0, false, {}};
  }
};

}  // namespace

TEST_CASE("classify_with applies the user's rules over the built-in ones") {
  const idem::classify_with<retry_500_rules> classifier;
  STATIC_REQUIRE(idem::Classifier<idem::classify_with<retry_500_rules>, int>);
  CHECK(classifier.classify(500).kind == disposition::transient);
  CHECK(classifier.classify(404).kind == disposition::permanent);
  CHECK(classifier.classify(200).kind == disposition::success);
  CHECK(classifier.classify_exception(thrown(my_timeout_error{})).kind == disposition::ambiguous);
  // The user's exception rule replaces the built-in one: a timed-out system_error is theirs too.
  CHECK(
      classifier
          .classify_exception(thrown(std::system_error(std::make_error_code(std::errc::timed_out))))
          .kind == disposition::permanent);
}

TEST_CASE("classify_with takes a lambda type, and leaves exceptions to the built-in rules") {
  using even_is_success = decltype([](int value) {
    return idem::classification{
        value % 2 == 0 ? disposition::success : disposition::transient, value, value % 2 != 0, {}};
  });
  const idem::classify_with<even_is_success> classifier;
  STATIC_REQUIRE(idem::Classifier<idem::classify_with<even_is_success>, int>);
  CHECK(classifier.classify(4).kind == disposition::success);
  CHECK(classifier.classify(7).kind == disposition::transient);
  CHECK(classifier.classify(7).code == 7);
  // The lambda takes no exception_ptr: exceptions are judged as default_classifier would.
  CHECK(
      classifier
          .classify_exception(thrown(std::system_error(std::make_error_code(std::errc::timed_out))))
          .kind == disposition::ambiguous);
  CHECK(classifier.classify_exception(thrown(std::runtime_error("boom"))).kind ==
        disposition::permanent);
}

// --- values the default classifier does not guess about -----------------------------------

TEST_CASE("the default classifier does not judge a plain int or string result") {
  // An int could be anything, an HTTP status among them: rather than call 503 a success, the
  // default classifier does not take it (retrying then fails to compile, with what to do).
  STATIC_REQUIRE_FALSE(idem::judged_by_default_classifier<int>);
  STATIC_REQUIRE_FALSE(idem::judged_by_default_classifier<std::string>);
  STATIC_REQUIRE_FALSE(idem::Classifier<idem::default_classifier, int>);
  STATIC_REQUIRE(idem::judged_by_default_classifier<void>);
  STATIC_REQUIRE(idem::judged_by_default_classifier<std::error_code>);
  STATIC_REQUIRE(idem::judged_by_default_classifier<response_with_status_member>);
}

TEST_CASE("exception_classifier<> takes a plain int or string result for a success") {
  const idem::exception_classifier<> classifier;
  // Not an HTTP status: failures are exceptions, so any returned value is a success.
  CHECK(classifier.classify(503).kind == disposition::success);
  CHECK(classifier.classify(500).kind == disposition::success);
  CHECK(classifier.classify(-1).kind == disposition::success);
  CHECK(classifier.classify(std::string("error: timed out")).kind == disposition::success);
  CHECK_FALSE(classifier.classify(503).fault);
  CHECK(classifier.classify(503).code == 0);
}

TEST_CASE("a std::errc result is judged by the errno rules, not taken for a success") {
  const idem::default_classifier classifier;
  CHECK(classifier.classify(std::errc::connection_refused).kind == idem::disposition::transient);
  CHECK(classifier.classify(std::errc::timed_out).kind == idem::disposition::ambiguous);
  CHECK(classifier.classify(std::errc::invalid_argument).kind == idem::disposition::permanent);
  CHECK(idem::error_code_classifier{}.classify(std::errc::connection_refused).kind ==
        idem::disposition::transient);
}
