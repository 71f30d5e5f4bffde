// The commands async_redis_store writes on its connections, in RESP (the Redis protocol): an
// operation's script calls are formatted once, when the operation starts (so the views it was
// given need not outlive that call), without their head, which names the script: EVALSHA and
// the digest, or EVAL and the text when the server answered NOSCRIPT. Plain commands (the
// handshake, the walks' SSCAN, SREM, ZCARD, SADD) are written whole.
#ifndef IDEM_STORE_REDIS_DETAIL_ASYNC_WIRE_HPP
#define IDEM_STORE_REDIS_DETAIL_ASYNC_WIRE_HPP

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <idem/store/redis/detail/command.hpp>
#include <idem/store/redis/detail/keys.hpp>
#include <idem/store/redis/detail/operations.hpp>
#include <idem/store/redis/detail/scripts.hpp>
#include <idem/store/redis/detail/walks.hpp>

namespace idem::detail {

struct redis_wire_command {
  bool script = false;
  redis_script name = redis_script::claim;  // script calls only
  std::size_t words = 0;                    // the words in `body`
  std::string body;                         // RESP bulk strings: a script call's from numkeys on
};

inline void redis_append_bulk(std::string& out, std::string_view word) {
  out.push_back('$');
  out.append(redis_decimal(word.size()));
  out.append("\r\n");
  out.append(word);
  out.append("\r\n");
}

inline redis_wire_command redis_wire_of(const redis_command& command) {
  redis_wire_command wire{.script = true,
                          .name = command.name,
                          .words = 1 + command.key_count + command.arg_count,
                          .body = {}};
  redis_append_bulk(wire.body, redis_decimal(command.key_count));
  for (std::size_t k = 0; k < command.key_count; ++k)
    redis_append_bulk(wire.body, command.keys[k]);
  for (std::size_t a = 0; a < command.arg_count; ++a)
    redis_append_bulk(wire.body, command.args[a]);
  return wire;
}

inline redis_wire_command redis_wire_of(std::span<const std::string_view> words) {
  redis_wire_command wire{.script = false, .name = {}, .words = words.size(), .body = {}};
  for (const std::string_view word : words)
    redis_append_bulk(wire.body, word);
  return wire;
}

inline std::vector<redis_wire_command> redis_wire_of(std::span<const redis_command> commands) {
  std::vector<redis_wire_command> out;
  out.reserve(commands.size());
  for (const redis_command& command : commands)
    out.push_back(redis_wire_of(command));
  return out;
}

// A walk's step, written out.
inline std::vector<redis_wire_command> redis_wire_of(const redis_step& step) {
  if (!step.scripts.empty()) return redis_wire_of(step.scripts);
  std::vector<redis_wire_command> out;
  out.reserve(step.plain.size());
  for (const std::vector<std::string_view>& words : step.plain)
    out.push_back(redis_wire_of(std::span<const std::string_view>(words)));
  return out;
}

// Appends `command` to what a connection writes next: a script call by its digest (`digests`
// indexed by redis_script), or by its text when `digests` is null.
inline void redis_append_wire(std::string& out, const redis_wire_command& command,
                              const std::string* digests) {
  out.push_back('*');
  out.append(redis_decimal(command.words + (command.script ? 2 : 0)));
  out.append("\r\n");
  if (command.script) {
    if (digests != nullptr) {
      redis_append_bulk(out, "EVALSHA");
      redis_append_bulk(out, digests[static_cast<std::size_t>(command.name)]);
    } else {
      redis_append_bulk(out, "EVAL");
      redis_append_bulk(out, redis_script_text(command.name));
    }
  }
  out.append(command.body);
}

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_ASYNC_WIRE_HPP
