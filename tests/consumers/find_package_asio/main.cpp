// Built against an installed idem with find_package(idem COMPONENTS asio): an operation whose
// first attempt fails with 503 is retried on an event loop and succeeds. Exits 0 only then.
#include <idem/asio.hpp>

#include <boost/asio/io_context.hpp>

#include <chrono>

namespace asio = idem::asio;

struct response {
  int status;
};

struct policies : idem::default_policies {
  using backoff = idem::constant_backoff;
};

int main() {
  asio::io_context io;
  auto call = [](const idem::attempt_context& attempt) -> asio::awaitable<response> {
    co_return response{attempt.attempt() == 1 ? 503 : 200};
  };
  idem::async_retrying<decltype(call), policies>::options options;
  options.backoff = idem::constant_backoff{std::chrono::milliseconds{1}};
  idem::async_retrying<decltype(call), policies> retry{io.get_executor(), call, options};
  bool ok = false;
  retry.async_call([&](std::exception_ptr error, idem::retry_outcome<response> outcome) {
    ok = !error && outcome.succeeded() && outcome.attempts() == 2;
  });
  io.run();
  return ok ? 0 : 1;
}
