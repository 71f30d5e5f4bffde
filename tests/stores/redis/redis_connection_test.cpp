// redis_client (idem/store/redis/detail/connection.hpp): the checks at start on answers as a server
// gives them (parsed from RESP by hiredis's reader, no server involved), the settings it
// refuses, and against real servers: connecting (database, AUTH, SELECT), the eviction policy
// refused at construction, a server without CONFIG, and scripts the server lost sent again
// with EVAL.
#include <catch2/catch.hpp>

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/store/redis.hpp>
#include <idem/store/redis/detail/connection.hpp>
#include <idem/store/redis/detail/keys.hpp>

#include "redis_test_support.hpp"
#include "support/store_errors.hpp"

using namespace std::chrono_literals;
using idem::claim_status;
using idem::detail::redis_client;
using idem::detail::redis_command;
using idem::detail::redis_reply;
using idem::detail::redis_script;
using idem::detail::redis_settings;
using idem_redis_test::claim_now;
using idem_redis_test::config_set;

using idem::testing::unavailable_message_of;

namespace {

// A reply as hiredis builds it from what a server sends.
redis_reply parsed(const std::string& resp) {
  redisReader* reader = redisReaderCreate();
  REQUIRE(reader != nullptr);
  void* reply = nullptr;
  const bool read = redisReaderFeed(reader, resp.data(), resp.size()) == REDIS_OK &&
                    redisReaderGetReply(reader, &reply) == REDIS_OK;
  redisReaderFree(reader);
  REQUIRE(read);
  REQUIRE(reply != nullptr);
  return redis_reply(static_cast<redisReply*>(reply));
}

std::string bulk(std::string_view text) {
  return "$" + std::to_string(text.size()) + "\r\n" + std::string(text) + "\r\n";
}

std::string policy_answer(std::string_view policy) {
  return "*2\r\n" + bulk("maxmemory-policy") + bulk(policy);
}

// The message of the std::invalid_argument `check` throws; fails the test when it throws none.
template <class Check>
std::string refusal_of(Check&& check) {
  try {
    check();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  FAIL("nothing was refused");
  return {};
}

redis_settings settings_for(std::string host, int port) {
  redis_settings settings;
  settings.host = std::move(host);
  settings.port = port;
  settings.pool_size = 2;
  settings.connect_timeout = 2s;
  settings.command_timeout = 5s;
  return settings;
}

redis_settings shared_settings() {
  const auto [host, port] = idem_redis_test::shared_server();
  return settings_for(host, port);
}

// How many times the server ran `command` (INFO commandstats), 0 when never.
long long calls_of(redisContext* context, const std::string& command) {
  const auto info = idem_redis_test::command(context, {"INFO", "commandstats"});
  const std::string_view text(info->str, info->len);
  const std::string field = "cmdstat_" + command + ":calls=";
  const std::size_t at = text.find(field);
  if (at == std::string_view::npos) return 0;
  return std::stoll(std::string(text.substr(at + field.size())));
}

}  // namespace

TEST_CASE("the major version is read from what INFO server says", "[redis][connection]") {
  using idem::detail::redis_major_version;
  CHECK(redis_major_version("# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:0\r\n") == 7);
  CHECK(redis_major_version("redis_version:6.2.14\r\n") == 6);
  CHECK(redis_major_version("redis_version:10.0.1\r\n") == 10);
  CHECK(redis_major_version("# Server\r\nredis_mode:standalone\r\n") == 0);
  CHECK(redis_major_version("redis_version:") == 0);
  CHECK(redis_major_version("redis_version:unknown\r\n") == 0);
  CHECK(redis_major_version("") == 0);
}

TEST_CASE("Redis 7.0 and newer pass the version check", "[redis][connection]") {
  for (const char* version : {"7.0.0", "7.2.4", "8.0.2", "10.1.0"}) {
    INFO(version);
    const redis_reply info = parsed(bulk("# Server\r\nredis_version:" + std::string(version) +
                                         "\r\nredis_mode:standalone\r\n"));
    CHECK_NOTHROW(idem::detail::redis_check_version(info.get(), "127.0.0.1:6379"));
  }
}

TEST_CASE("a server older than Redis 7.0 is refused, naming it and quoting INFO",
          "[redis][connection]") {
  const std::string text = "# Server\r\nredis_version:6.2.14\r\n" + std::string(300, 'x');
  const redis_reply info = parsed(bulk(text));
  const std::string message =
      refusal_of([&] { idem::detail::redis_check_version(info.get(), "10.0.0.5:6380"); });
  CHECK_THAT(message, Catch::Matchers::Contains("the server at 10.0.0.5:6380"));
  CHECK_THAT(message, Catch::Matchers::Contains("is not Redis 7.0 or newer"));
  // What INFO said, cut at 200 bytes.
  CHECK_THAT(message, Catch::Matchers::Contains("(INFO says: " + text.substr(0, 200) + ")"));
}

TEST_CASE("an INFO answer that is not the server's text is refused", "[redis][connection]") {
  // An error (INFO renamed away, or denied by an ACL), quoted in the message.
  const redis_reply error = parsed("-ERR unknown command 'INFO'\r\n");
  CHECK_THAT(refusal_of([&] { idem::detail::redis_check_version(error.get(), "here"); }),
             Catch::Matchers::Contains("INFO says: ERR unknown command 'INFO'"));
  // Only a bulk string is INFO's text, whatever another kind of answer spells.
  const redis_reply status = parsed("+redis_version:7.0.0\r\n");
  CHECK_THAT(refusal_of([&] { idem::detail::redis_check_version(status.get(), "here"); }),
             Catch::Matchers::Contains("is not Redis 7.0 or newer"));
}

TEST_CASE("every allkeys-* and volatile-* policy may evict records, noeviction does not",
          "[redis][connection]") {
  using idem::detail::redis_policy_may_evict;
  for (const char* policy : {"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru",
                             "volatile-lfu", "volatile-random", "volatile-ttl"}) {
    INFO(policy);
    CHECK(redis_policy_may_evict(policy));
  }
  CHECK_FALSE(redis_policy_may_evict("noeviction"));
}

TEST_CASE("a maxmemory-policy that may evict is refused, naming it and noeviction",
          "[redis][connection]") {
  const redis_reply evicting = parsed(policy_answer("volatile-ttl"));
  const std::string message = refusal_of(
      [&] { idem::detail::redis_check_eviction_policy(evicting.get(), "127.0.0.1:6379"); });
  CHECK_THAT(message, Catch::Matchers::Contains("the server at 127.0.0.1:6379"));
  CHECK_THAT(message, Catch::Matchers::Contains("has maxmemory-policy volatile-ttl"));
  CHECK_THAT(message, Catch::Matchers::Contains("set maxmemory-policy noeviction"));

  const redis_reply safe = parsed(policy_answer("noeviction"));
  CHECK_NOTHROW(idem::detail::redis_check_eviction_policy(safe.get(), "127.0.0.1:6379"));
}

TEST_CASE("an answer that does not show the maxmemory-policy is refused", "[redis][connection]") {
  // CONFIG renamed, CONFIG denied by an ACL, and answers of the wrong shape.
  const std::vector<std::pair<std::string, std::string>> answers = {
      {"-ERR unknown command 'CONFIG'\r\n", "CONFIG GET answered: ERR unknown command 'CONFIG'"},
      {"-NOPERM this user has no permissions\r\n", "answered: NOPERM this user has no"},
      {"*0\r\n", "CONFIG GET answered: )"},
      {"*1\r\n" + bulk("maxmemory-policy"), "cannot read the maxmemory-policy"},
      {bulk("noeviction"), "CONFIG GET answered: noeviction)"},
  };
  for (const auto& [resp, quoted] : answers) {
    INFO(resp);
    const redis_reply answer = parsed(resp);
    const std::string message =
        refusal_of([&] { idem::detail::redis_check_eviction_policy(answer.get(), "here"); });
    CHECK_THAT(message, Catch::Matchers::Contains("cannot read the maxmemory-policy"));
    CHECK_THAT(message, Catch::Matchers::Contains(quoted));
    CHECK_THAT(message, Catch::Matchers::Contains("verify_eviction_policy = false"));
  }
}

TEST_CASE("settings no connection could use are refused before connecting", "[redis][connection]") {
  auto settings = settings_for("127.0.0.1", 6379);
  SECTION("an empty pool") {
    settings.pool_size = 0;
    CHECK_THAT(refusal_of([&] { redis_client client(settings); }),
               Catch::Matchers::Contains("pool_size must be at least 1"));
  }
  SECTION("a port outside 1-65535, without a socket") {
    for (const int port : {0, -1, 65536}) {
      settings.port = port;
      CHECK_THAT(refusal_of([&] { redis_client client(settings); }),
                 Catch::Matchers::Contains("port " + std::to_string(port) + " is not a TCP port"));
    }
  }
  SECTION("a timeout that is not positive") {
    settings.connect_timeout = 0ms;
    CHECK_THAT(refusal_of([&] { redis_client client(settings); }),
               Catch::Matchers::Contains("timeouts must be positive"));
    settings.connect_timeout = 1s;
    settings.command_timeout = -1ms;
    CHECK_THAT(refusal_of([&] { redis_client client(settings); }),
               Catch::Matchers::Contains("timeouts must be positive"));
  }
}

TEST_CASE("a client names its server by host and port, or by its socket, and connects lazily",
          "[redis][connection]") {
  // Nothing need listen: a client connects on first use, not when it is made.
  const redis_client by_port(settings_for("10.0.0.5", 6380));
  CHECK(by_port.where() == "10.0.0.5:6380");
  auto settings = settings_for("10.0.0.5", 0);  // the port is not used with a socket
  settings.unix_socket = "/run/redis/redis.sock";
  const redis_client by_socket(settings);
  CHECK(by_socket.where() == "/run/redis/redis.sock");
}

TEST_CASE("a client starts on the shared server and runs its scripts", "[redis][connection]") {
  redis_client client(shared_settings());
  client.start();
  const auto names = idem::detail::redis_keys_of(idem_redis_test::unique_prefix(), "s", "k");
  const std::string server_time;  // an empty `now`: the server's clock
  const redis_command find[] = {redis_command{redis_script::find, {names.record}, {server_time}}};
  const auto replies = client.exchange(find, "find");
  REQUIRE(replies.size() == 1);
  CHECK(replies[0]->type == REDIS_REPLY_NIL);  // no such record, and no error
}

TEST_CASE("a connection is made on the database the settings name", "[redis][connection]") {
  for (const int database : {0, 3}) {
    INFO("database " << database);
    auto settings = shared_settings();
    settings.database = database;
    const redis_client client(settings);
    const auto connection = client.connect();
    REQUIRE(connection);
    CHECK(connection->err == 0);
    const auto info = idem_redis_test::command(connection.get(), {"CLIENT", "INFO"});
    CHECK_THAT(std::string(info->str, info->len),
               Catch::Matchers::Contains(" db=" + std::to_string(database) + " "));
  }
}

TEST_CASE("a server that refuses AUTH or SELECT is store_error(unavailable), naming which",
          "[redis][connection]") {
  // The shared server has no password: AUTH with one is refused, as a wrong one would be.
  auto settings = shared_settings();
  settings.password = "not-the-password";
  const redis_client without_user(settings);
  CHECK_THAT(unavailable_message_of([&] { (void)without_user.connect(); }),
             Catch::Matchers::Contains("refused AUTH"));
  settings.username = "nobody";
  const redis_client with_user(settings);
  CHECK_THAT(unavailable_message_of([&] { (void)with_user.connect(); }),
             Catch::Matchers::Contains("refused AUTH: WRONGPASS"));

  settings = shared_settings();
  settings.database = 100000;  // past the server's 16 databases
  const redis_client out_of_range(settings);
  CHECK_THAT(unavailable_message_of([&] { (void)out_of_range.connect(); }),
             Catch::Matchers::Contains("refused SELECT 100000"));
}

TEST_CASE("a server that may evict records is refused at construction", "[redis][server]") {
  idem_redis_test::private_redis server;
  for (const char* policy : {"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru",
                             "volatile-lfu", "volatile-random", "volatile-ttl"}) {
    INFO(policy);
    config_set(server, "maxmemory-policy", policy);
    try {
      idem::redis_store store(server.options());
      FAIL("the store accepted maxmemory-policy " << policy);
    } catch (const std::invalid_argument& error) {
      CHECK_THAT(error.what(), Catch::Matchers::Contains(policy));
      CHECK_THAT(error.what(), Catch::Matchers::Contains("noeviction"));
    }
  }
  config_set(server, "maxmemory-policy", "noeviction");
  idem::redis_store store(server.options());
  CHECK(store.claim(claim_now("s", "k")).status == claim_status::claimed);
}

TEST_CASE("a server without CONFIG is refused unless the operator vouches for its policy",
          "[redis][server]") {
  idem_redis_test::private_redis server({"--rename-command", "CONFIG", ""});
  try {
    idem::redis_store store(server.options());
    FAIL("the store started without knowing the eviction policy");
  } catch (const std::invalid_argument& error) {
    CHECK_THAT(error.what(), Catch::Matchers::Contains("maxmemory-policy"));
    CHECK_THAT(error.what(), Catch::Matchers::Contains("verify_eviction_policy"));
  }
  auto options = server.options();
  options.verify_eviction_policy = false;
  idem::redis_store store(options);
  CHECK(store.claim(claim_now("s", "k")).status == claim_status::claimed);
}

// On a private server, so that SCRIPT FLUSH and the command counts are this test's alone.
TEST_CASE("scripts the server lost are sent again with EVAL, the batch in its order",
          "[redis][server]") {
  idem_redis_test::private_redis server;
  redis_client client(settings_for("127.0.0.1", server.port()));
  client.start();
  const auto raw = server.connect();
  REQUIRE(idem_redis_test::command(raw.get(), {"SCRIPT", "FLUSH"})->type == REDIS_REPLY_STATUS);

  // A claim, then a find of the record it makes: both in one batch, both lost to the server.
  const auto names = idem::detail::redis_keys_of(idem_redis_test::unique_prefix(), "s", "k");
  const std::string server_time;
  const std::string lease = idem::detail::redis_decimal(std::chrono::nanoseconds(1h).count());
  const std::string retention = idem::detail::redis_decimal(std::chrono::nanoseconds(24h).count());
  const std::string fingerprint = "f";
  const std::string key = "k";
  const std::string no_extra_ttl = "0";
  const std::string no_cap;
  const std::string no_recovery;
  const redis_command batch[] = {
      redis_command{
          redis_script::claim,
          {names.record, names.expiry, names.lease},
          {server_time, lease, retention, fingerprint, key, no_extra_ttl, no_cap, no_recovery}},
      redis_command{redis_script::find, {names.record}, {server_time}},
  };
  const auto replies = client.exchange(batch, "claim and find");
  REQUIRE(replies.size() == 2);
  REQUIRE(replies[0]->type == REDIS_REPLY_ARRAY);
  CHECK(replies[0]->element[0]->integer == 0);  // claimed
  REQUIRE(replies[1]->type == REDIS_REPLY_ARRAY);
  CHECK(replies[1]->elements == 8);  // found: the find ran after the claim
  CHECK(calls_of(raw.get(), "eval") == 2);

  // EVAL left the scripts on the server again: the next call needs no EVAL.
  const redis_command find[] = {redis_command{redis_script::find, {names.record}, {server_time}}};
  CHECK(client.exchange(find, "find")[0]->type == REDIS_REPLY_ARRAY);
  CHECK(calls_of(raw.get(), "eval") == 2);
}
