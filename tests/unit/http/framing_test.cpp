// idem/http/framing.hpp: every framing a proxy and a server could read two ways is refused with
// its status, before a body is read, and every well-framed request goes on. The servers' tests
// (tests/payments, tests/http) send the same shapes over real sockets.
#include <catch2/catch.hpp>

#include <idem/http/framing.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace http = idem::http;

namespace {

const std::string payment = R"({"amount":100,"currency":"EUR","source":"tok_visa"})";

/// A POST's head with `fields` (each "Name: value\r\n"), and its request line.
std::string head_with(const std::string& fields,
                      const std::string& request_line = "POST /v1/payments HTTP/1.1") {
  return request_line + "\r\nHost: x\r\n" + fields + "\r\n";
}

/// The status of the head's refusal, 0 when it goes on.
int status_of(const std::string& head, const http::framing_options& options = {}) {
  const auto refusal = http::check_request_head(head, options);
  if (!refusal) return 0;
  CHECK_FALSE(refusal->reason.empty());
  return refusal->status;
}

using fields = std::vector<std::pair<std::string, std::string>>;

int status_of_fields(const fields& list, const http::framing_options& options = {}) {
  const auto refusal = http::check_request_fields(list, options);
  return refusal ? refusal->status : 0;
}

}  // namespace

TEST_CASE("a well-framed request goes on: a Content-Length, a chunked body, 100-continue") {
  CHECK(status_of(head_with("Content-Length: 52\r\n")) == 0);
  CHECK(status_of(head_with("Transfer-Encoding: chunked\r\n")) == 0);
  CHECK(status_of(head_with("transfer-encoding:  Chunked \r\n")) == 0);
  CHECK(status_of(head_with("Content-Length: 52\r\nExpect: 100-continue\r\n")) == 0);
  CHECK(status_of(head_with("X-Note: caf\xc3\xa9\t(obs-text and a tab)\r\n")) == 0);
  CHECK(status_of(head_with("", "GET /idempotency HTTP/1.0")) == 0);
  CHECK(status_of(head_with("Content-Length: 65536\r\n")) == 0);  // at the limit
}

TEST_CASE("Transfer-Encoding with Content-Length is a 400, in either order") {
  CHECK(status_of(head_with("Transfer-Encoding: chunked\r\nContent-Length: 52\r\n")) == 400);
  CHECK(status_of(head_with("Content-Length: 52\r\nTransfer-Encoding: chunked\r\n")) == 400);
  CHECK(status_of(head_with("Content-Length: 52\r\nTransfer-Encoding: gzip\r\n")) == 400);
}

TEST_CASE("two Content-Lengths are a 400, equal or not, as fields or as a list") {
  CHECK(status_of(head_with("Content-Length: 52\r\nContent-Length: 10\r\n")) == 400);
  CHECK(status_of(head_with("Content-Length: 52\r\nContent-Length: 52\r\n")) == 400);
  CHECK(status_of(head_with("Content-Length: 52, 52\r\n")) == 400);
  CHECK(status_of(head_with("Content-Length: +52\r\n")) == 400);
  CHECK(status_of(head_with("Content-Length: 5 2\r\n")) == 400);
  CHECK(status_of(head_with("Content-Length: 0x34\r\n")) == 400);
  CHECK(status_of(head_with("Content-Length:\r\n")) == 400);
  CHECK(status_of(head_with("Content-Length: 99999999999999999999\r\n")) == 400);
}

TEST_CASE("a transfer coding other than chunked is a 501, chunked twice a 400") {
  CHECK(status_of(head_with("Transfer-Encoding: gzip, chunked\r\n")) == 501);
  CHECK(status_of(head_with("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n")) == 501);
  CHECK(status_of(head_with("Transfer-Encoding: identity\r\n")) == 501);
  CHECK(status_of(head_with("Transfer-Encoding: chunked, gzip\r\n")) == 501);
  CHECK(status_of(head_with("Transfer-Encoding: chunked, chunked\r\n")) == 400);
  CHECK(status_of(head_with("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n")) ==
        400);
  CHECK(status_of(head_with("Transfer-Encoding: \r\n")) == 400);
  CHECK(status_of(head_with("Transfer-Encoding: ,\r\n")) == 400);
}

TEST_CASE("a folded field line is a 400, never joined") {
  CHECK(status_of(head_with("X-Account: acct_1\r\n acct_2\r\nContent-Length: 52\r\n")) == 400);
  CHECK(status_of(head_with("Content-Length: 52\r\n\t0\r\n")) == 400);
}

TEST_CASE("a CR, an LF or a NUL inside a field value is a 400") {
  CHECK(status_of(head_with("X-Account: acct_1\rX-Account: acct_2\r\n")) == 400);  // bare CR
  CHECK(status_of(head_with("X-Account: acct_1\nX-Account: acct_2\r\n")) == 400);  // bare LF
  CHECK(status_of(head_with(std::string("X-Account: acct\0_1\r\n", 21))) == 400);
  CHECK(status_of(head_with("X-Account: acct\x7f_1\r\n")) == 400);
  // The same through the fields a library parsed (cpp-httplib keeps a bare CR in the value).
  CHECK(status_of_fields({{"X-Account", "acct_1\rX-Account: acct_2"}}) == 400);
  CHECK(status_of_fields({{"X-Account", "acct_1"}}) == 0);
}

TEST_CASE("a field name that is not a token is a 400: space before the colon, a fold's remnant") {
  CHECK(status_of(head_with("Content-Length : 52\r\n")) == 400);
  CHECK(status_of(head_with("X Account: acct_1\r\n")) == 400);
  CHECK(status_of(head_with(": nameless\r\n")) == 400);
  CHECK(status_of(head_with("no colon here\r\n")) == 400);
  CHECK(status_of_fields({{" acct_2", "x"}}) == 400);  // a folded line with a colon in it
}

TEST_CASE("a head past its limits is a 431: its bytes, its field count") {
  std::string many;
  for (int i = 0; i < 2000; ++i)
    many += "X-" + std::to_string(i) + ": a\r\n";
  http::framing_options roomy;
  roomy.max_head_bytes = 1 << 20;
  CHECK(status_of(head_with(many), roomy) == 431);
  CHECK(status_of(head_with("X-Padding: " + std::string(9 * 1024, 'p') + "\r\n")) == 431);
  fields list;
  for (int i = 0; i < 101; ++i)
    list.emplace_back("X-" + std::to_string(i), "a");
  CHECK(status_of_fields(list) == 431);
  list.pop_back();
  CHECK(status_of_fields(list) == 0);
}

TEST_CASE("a Content-Length past max_body_bytes is a 413 before the body is read") {
  CHECK(status_of(head_with("Content-Length: 65537\r\n")) == 413);
  CHECK(status_of(head_with("Content-Length: 65537\r\n"), http::framing_options::framing_only()) ==
        0);
}

TEST_CASE("without chunked_bodies a chunked body is a 411") {
  http::framing_options no_chunked;
  no_chunked.chunked_bodies = false;
  CHECK(status_of(head_with("Transfer-Encoding: chunked\r\n"), no_chunked) == 411);
  CHECK(status_of(head_with("Content-Length: 52\r\n"), no_chunked) == 0);
}

TEST_CASE("an expectation other than 100-continue is a 417") {
  CHECK(status_of(head_with("Expect: 100-continue\r\n")) == 0);
  CHECK(status_of(head_with("Expect: 100-Continue\r\n")) == 0);
  CHECK(status_of(head_with("Expect: 200-ok\r\n")) == 417);
  CHECK(status_of(head_with("Expect: 100-continue\r\nExpect: 100-continue\r\n")) == 417);
}

TEST_CASE("two Host fields are a 400") {
  CHECK(status_of(head_with("Host: y\r\n")) == 400);
}

TEST_CASE("a malformed request line is a 400, another major version a 505") {
  CHECK(status_of("POST /v1/payments\r\n\r\n") == 400);
  CHECK(status_of("POST /v1/pay ments HTTP/1.1\r\n\r\n") == 400);
  CHECK(status_of("PO(ST /v1/payments HTTP/1.1\r\n\r\n") == 400);
  CHECK(status_of("POST /v1/payments HTTP/1.1 \r\n\r\n") == 400);
  CHECK(status_of("POST /v1/payments HTTQ/1.1\r\n\r\n") == 400);
  CHECK(status_of("POST /v1/payments HTTP/2.0\r\n\r\n") == 505);
  CHECK(status_of("POST /v1/payments HTTP/1.1\r\nHost: x\r\n") == 400);  // no empty line
}

TEST_CASE("a refusal is written as an about:blank problem that closes the connection") {
  http::reply out;
  http::write_framing_refusal({501, "a transfer coding other than chunked"}, out);
  CHECK(out.status == 501);
  CHECK(out.header("Connection") == "close");
  CHECK(out.content_type == "application/problem+json");
  CHECK(out.body == R"({"type":"about:blank","title":"Not Implemented","status":501,)"
                    R"("detail":"a transfer coding other than chunked"})");
}
