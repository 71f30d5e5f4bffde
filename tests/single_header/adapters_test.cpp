// The single header composes with the store adapters: a user who copies single_include/idem/
// idem.hpp puts include/ after it on the include path and includes an adapter by name. Each
// store then guards a real request (executed once, replayed byte for byte), against SQLite in
// a temporary file and the PostgreSQL and Redis servers scripts/test.sh started.
#include <idem/idem.hpp>
#include <idem/store/postgres.hpp>
#include <idem/store/redis.hpp>
#include <idem/store/sqlite.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

#include <unistd.h>

#include "single_header_adapters.hpp"

namespace idem_single_header {

idem::digest digest_from_single_header_first(std::string_view text) {
  return idem::xxh3_128::hash(text);
}

}  // namespace idem_single_header

namespace {

std::string unique_name(std::string_view what) {
  static std::atomic<int> counter{0};
  static const unsigned salt = std::random_device{}() % 100000;
  return std::string(what) + "_" + std::to_string(::getpid()) + "_" + std::to_string(salt) + "_" +
         std::to_string(counter.fetch_add(1));
}

std::string environment(const char* name) {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing sets the environment while tests run
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    FAIL(name << " is not set: run the tests through scripts/test.sh");
  }
  return value;
}

template <class Store>
struct store_policies : idem::default_policies {
  using store = Store;
};

// One request executed, then replayed, through `Store`: what a user of the single header does.
template <class Store>
void guards_a_request(Store store) {
  using policies = store_policies<Store>;
  int runs = 0;
  auto handler = [&runs](const idem::http_request& request) {
    ++runs;
    return idem::http_response{201, {}, "charged " + request.body};
  };
  typename idem::idempotent<decltype(handler), policies>::options parts;
  parts.store = std::move(store);
  idem::idempotent<decltype(handler), policies> guarded{handler, std::move(parts)};
  const idem::http_request request{
      "POST", "/charges", {{"Idempotency-Key", unique_name("k")}}, "9 EUR"};
  const auto first = guarded("single-header", request);
  const auto again = guarded("single-header", request);
  CHECK(first.verdict() == idem::verdict::executed);
  CHECK(again.verdict() == idem::verdict::replayed);
  CHECK(again->body == "charged 9 EUR");
  CHECK(runs == 1);
}

}  // namespace

TEST_CASE("the single header and an adapter included after it define each type once") {
  CHECK(idem_single_header::adapter_first_translation_unit_sees_one_digest());
}

TEST_CASE("a sqlite_store guards a request through the single header") {
  const auto path = std::filesystem::temp_directory_path() / (unique_name("idem-single") + ".db");
  guards_a_request(idem::sqlite_store{path.string()});
  std::error_code ignored;
  for (const char* suffix : {"", "-wal", "-shm"})
    std::filesystem::remove(path.string() + suffix, ignored);
}

TEST_CASE("a postgres_store guards a request through the single header") {
  idem::postgres_store::options options;
  options.conninfo = environment("IDEM_TEST_PG_CONNINFO");
  options.table = unique_name("t_single");
  guards_a_request(idem::postgres_store{std::move(options)});
}

TEST_CASE("a redis_store guards a request through the single header") {
  idem::redis_store::options options;
  options.host = environment("IDEM_TEST_REDIS_HOST");
  options.port = std::stoi(environment("IDEM_TEST_REDIS_PORT"));
  options.prefix = unique_name("idem-single") + ":";
  guards_a_request(idem::redis_store{std::move(options)});
}
