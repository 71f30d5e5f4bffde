// What the asynchronous Redis store's tests share: stores on the shared test server
// (IDEM_TEST_REDIS_*) or on a private redis-server (redis_test_support.hpp), each with a key
// prefix of its own, their keys deleted when the test case ends; a thread pool that runs their
// executor, so that blocking_store's callers (the test's own threads) can wait on them.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <idem/async/blocking_store.hpp>
#include <idem/store/redis/async.hpp>

#include "redis_test_support.hpp"

namespace idem_redis_async_test {

namespace asio = idem::asio;

using blocking_async = idem::blocking_store<idem::async_redis_store>;

/// Options for a store on the server at host:port, under a prefix of its own.
inline idem::async_redis_store::options options_at(const std::string& host, int port,
                                                   idem::time_source time) {
  idem::async_redis_store::options options;
  options.host = host;
  options.port = port;
  options.prefix = idem_redis_test::unique_prefix();
  options.clock = time;
  return options;
}

inline idem::async_redis_store::options shared_options(idem::time_source time) {
  const auto [host, port] = idem_redis_test::shared_server();
  return options_at(host, port, time);
}

inline idem::async_redis_store::options private_options(
    const idem_redis_test::private_redis& server,
    idem::time_source time = idem::time_source::server) {
  return options_at("127.0.0.1", server.port(), time);
}

/// Stores on a pool of threads the object owns; the keys of every store it made are deleted
/// when it goes (after the stores, which must go first).
class store_maker {
 public:
  store_maker() : store_maker(2) {}
  explicit store_maker(std::size_t threads) : pool_(std::make_unique<asio::thread_pool>(threads)) {}
  store_maker(const store_maker&) = delete;
  store_maker& operator=(const store_maker&) = delete;
  ~store_maker() {
    pool_->join();
    for (const auto& options : made_)
      idem_redis_test::remove_keys(options.host, options.port, options.prefix);
  }

  asio::any_io_executor executor() const { return pool_->get_executor(); }

  idem::async_redis_store make(const idem::async_redis_store::options& options) {
    made_.push_back(options);
    return idem::async_redis_store(executor(), options);
  }
  blocking_async make_blocking(const idem::async_redis_store::options& options) {
    return blocking_async(make(options));
  }

 private:
  std::unique_ptr<asio::thread_pool> pool_;
  std::vector<idem::async_redis_store::options> made_;
};

/// A claim at this machine's time of `key` in scope "s", with a fingerprint of its own.
inline idem::claim_request claim_of(std::string_view key,
                                    std::chrono::nanoseconds lease = std::chrono::hours{1}) {
  static const std::uint8_t bytes[16] = {4, 2};
  return idem::claim_request{"s",
                             key,
                             idem::digest{bytes},
                             std::chrono::system_clock::now(),
                             lease,
                             std::chrono::hours{24}};
}

/// Whether `error` is a store_error(unavailable) whose message says `words`.
inline bool unavailable_saying(const std::exception_ptr& error, std::string_view words) {
  if (!error) return false;
  try {
    std::rethrow_exception(error);
  } catch (const idem::store_error& failure) {
    return failure.failure() == idem::store_failure::unavailable &&
           std::string_view(failure.what()).find(words) != std::string_view::npos;
  } catch (...) {
    return false;
  }
}

/// A field of INFO (as a number), asked on a fresh connection.
inline long long info_number(const idem_redis_test::private_redis& server,
                             const std::string& section, const std::string& field) {
  const auto connection = server.connect();
  const auto reply = idem_redis_test::command(connection.get(), {"INFO", section});
  const std::string text(reply->str, reply->len);
  const std::size_t at = text.find(field + ":");
  REQUIRE(at != std::string::npos);
  return std::stoll(text.substr(at + field.size() + 1));
}

}  // namespace idem_redis_async_test
