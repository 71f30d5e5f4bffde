// Built against an installed idem with find_package(idem COMPONENTS redis_asio postgres_asio):
// both asynchronous stores compile and link, and a store default-constructed (no server) refuses
// an operation at its start, as each documents: the PostgreSQL store with
// store_error(unavailable), the Redis store with std::logic_error. Exits 0 only then.
#include <idem/asio.hpp>
#include <idem/store/postgres/async.hpp>
#include <idem/store/redis/async.hpp>

#include <boost/asio/io_context.hpp>

#include <stdexcept>

namespace asio = idem::asio;

template <class Refusal, class Store>
bool refuses(Store& store) {
  try {
    (void)store.async_find("scope", "key", idem::store_time{}, asio::use_future).get();
  } catch (const Refusal&) {
    return true;
  }
  return false;
}

int main() {
  static_assert(idem::AsyncStore<idem::async_redis_store>);
  static_assert(idem::AsyncTransactionalStore<idem::async_postgres_store>);
  idem::async_redis_store redis;        // default-constructed: no server
  idem::async_postgres_store postgres;  // the same
  return refuses<std::logic_error>(redis) && refuses<idem::store_error>(postgres) ? 0 : 1;
}
