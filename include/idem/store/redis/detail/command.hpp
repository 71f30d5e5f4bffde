// One script call as redis_store's operations describe it: which script, its keys and its
// arguments, as views into strings that outlive the exchange. How it travels is the client's
// business: hiredis's argv for the blocking client (connection.hpp), RESP written by hand for
// the asynchronous one (async/wire.hpp).
#ifndef IDEM_STORE_REDIS_DETAIL_COMMAND_HPP
#define IDEM_STORE_REDIS_DETAIL_COMMAND_HPP

#include <cstddef>
#include <initializer_list>
#include <string_view>

#include <idem/store/redis/detail/scripts.hpp>

namespace idem::detail {

// EVALSHA sha numkeys keys... args... (EVAL with the text after NOSCRIPT).
struct redis_command {
  static constexpr std::size_t max_keys = 3;
  static constexpr std::size_t max_args = 8;  // claim's
  redis_command(redis_script which, std::initializer_list<std::string_view> key_list,
                std::initializer_list<std::string_view> arg_list)
      : name(which) {
    for (const std::string_view key : key_list)
      keys[key_count++] = key;
    for (const std::string_view arg : arg_list)
      args[arg_count++] = arg;
  }
  redis_script name;
  std::string_view keys[max_keys];
  std::string_view args[max_args];
  std::size_t key_count = 0;
  std::size_t arg_count = 0;
};

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_COMMAND_HPP
