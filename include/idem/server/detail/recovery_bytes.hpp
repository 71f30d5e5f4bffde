// The recovery bytes of a record in progress: what its handler recorded so far, as one string the
// store keeps whole (opaque to it) and a takeover hands back.
//
// A sequence of entries, each a name and a value (a varint length and its bytes). A step's result
// is the entry named for the step. idem's own entries have names that begin with a zero byte,
// which no step name may (handler_context refuses one), so they never collide:
//
//   "\0request"          the kept request of a resumable wrapper: the wrapper's name and the
//                        request's encoded bytes, each length-prefixed; written by the claim, so
//                        the record holds it from its first instant
//   "\0started" + name   step `name` is about to call its function; written in the same fenced
//                        write that renews the lease before the function runs. Its value is the
//                        reference the downstream call is made under, empty for the step's
//                        downstream key (handler_context::downstream_key(name)), which the
//                        reader derives from scope, key and name rather than store 64 bytes
//
// A step with a started entry and no result entry was started and never finished: its effect
// may or may not have happened, which the step's lookup, or the reconciler's report, finds out.
// Records written before these entries existed hold result entries alone, and read the same.
#ifndef IDEM_SERVER_DETAIL_RECOVERY_BYTES_HPP
#define IDEM_SERVER_DETAIL_RECOVERY_BYTES_HPP

#include <cstddef>
#include <string>
#include <string_view>

#include <idem/core/codec.hpp>

namespace idem::detail {

inline constexpr std::string_view kept_request_entry{"\0request", 8};
inline constexpr std::string_view started_entry_prefix{"\0started", 8};

/// Whether `name` is one of idem's own entries rather than a step's result.
constexpr bool reserved_entry(std::string_view name) noexcept {
  return !name.empty() && name.front() == '\0';
}

inline void put_entry(std::string& out, std::string_view name, std::string_view value) {
  put_varint(out, name.size());
  out.append(name);
  put_varint(out, value.size());
  out.append(value);
}

/// The started entry of step `name`.
inline void put_started(std::string& out, std::string_view name, std::string_view reference) {
  put_varint(out, started_entry_prefix.size() + name.size());
  out.append(started_entry_prefix);
  out.append(name);
  put_varint(out, reference.size());
  out.append(reference);
}

/// The kept request: the recovery bytes a resumable wrapper's claim gives the store.
inline std::string kept_request(std::string_view handler_name, std::string_view request) {
  std::string value;
  put_varint(value, handler_name.size());
  value.append(handler_name);
  value.append(request);
  std::string out;
  put_entry(out, kept_request_entry, value);
  return out;
}

/// Calls visit(name, value) for each entry in order; throws codec_error for bytes that are not
/// entries.
template <class Visit>
void for_each_entry(std::string_view recovery, Visit&& visit) {
  while (!recovery.empty()) {
    const std::string_view name = take_bytes(recovery, "recovery point name");
    const std::string_view value = take_bytes(recovery, "recovery point value");
    visit(name, value);
  }
}

/// The recorded result of step `name` (the first, should there be two).
inline bool find_step(std::string_view recovery, std::string_view name, std::string_view& value) {
  while (!recovery.empty()) {
    const std::string_view entry_name = take_bytes(recovery, "recovery point name");
    const std::string_view entry_value = take_bytes(recovery, "recovery point value");
    if (entry_name == name && !reserved_entry(entry_name)) {
      value = entry_value;
      return true;
    }
  }
  return false;
}

/// Whether step `name` has a started entry.
inline bool find_started(std::string_view recovery, std::string_view name) {
  bool found = false;
  for_each_entry(recovery, [&](std::string_view entry, std::string_view) {
    if (entry.size() == started_entry_prefix.size() + name.size() &&
        entry.starts_with(started_entry_prefix) &&
        entry.substr(started_entry_prefix.size()) == name) {
      found = true;
    }
  });
  return found;
}

/// The steps whose results are recorded.
inline std::size_t count_steps(std::string_view recovery) {
  std::size_t count = 0;
  for_each_entry(recovery, [&](std::string_view name, std::string_view) {
    if (!reserved_entry(name)) ++count;
  });
  return count;
}

}  // namespace idem::detail

#endif  // IDEM_SERVER_DETAIL_RECOVERY_BYTES_HPP
