// Built against an installed idem with find_package(idem COMPONENTS sqlite): a request runs once
// through a SQLite store in a fresh file, and its repeat replays. Exits 0 only if both happen.
#include <idem/idem.hpp>
#include <idem/store/sqlite.hpp>

#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

struct policies : idem::default_policies {
  using store = idem::sqlite_store;
};

int main(int argc, char**) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("idem-consumer-" + std::to_string(::getpid()) + ".sqlite3");
  int runs = 0;
  bool ok = false;
  {
    auto handler = [&runs](const idem::http_request& request) {
      ++runs;
      return idem::http_response{201, {}, request.body};
    };
    idem::idempotent<decltype(handler), policies>::options parts;
    parts.store = idem::sqlite_store{path.string()};
    idem::idempotent<decltype(handler), policies> guarded{handler, std::move(parts)};
    const idem::http_request request{"POST", "/", {{"Idempotency-Key", "k"}}, "body"};
    const auto first = guarded("scope", request);
    const auto again = guarded("scope", request);
    ok = argc > 0 && first.verdict() == idem::verdict::executed &&
         again.verdict() == idem::verdict::replayed && again->body == "body" && runs == 1;
  }
  std::error_code ignored;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::filesystem::remove(path.string() + suffix, ignored);
  }
  return ok ? 0 : 1;
}
