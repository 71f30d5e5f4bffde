// Built against an installed idem with find_package(idem COMPONENTS redis_asio postgres_asio):
// both asynchronous stores compile and link, and a store made without a server refuses an
// operation as unavailable, through the completion token. Exits 0 only then.
#include <idem/asio.hpp>
#include <idem/store/async_postgres.hpp>
#include <idem/store/async_redis.hpp>

#include <boost/asio/io_context.hpp>

#include <exception>

namespace asio = idem::asio;

template <class Store>
bool refuses(Store& store) {
  try {
    (void)store.async_find("scope", "key", idem::store_time{}, asio::use_future).get();
  } catch (const idem::store_error& error) {
    return error.failure() == idem::store_failure::unavailable;
  }
  return false;
}

int main() {
  static_assert(idem::AsyncStore<idem::async_redis_store>);
  static_assert(idem::AsyncTransactionalStore<idem::async_postgres_store>);
  idem::async_redis_store redis;        // default-constructed: no server
  idem::async_postgres_store postgres;  // the same
  return refuses(redis) && refuses(postgres) ? 0 : 1;
}
