// A hiredis reply owned by unique_ptr, and the decoding of what redis_store's scripts answer
// into a record. Free functions so that the fuzz target
// (tests/fuzz/redis_record_fuzz.cpp) reaches them without a server.
#ifndef IDEM_STORE_REDIS_DETAIL_REPLY_HPP
#define IDEM_STORE_REDIS_DETAIL_REPLY_HPP

#include <hiredis/hiredis.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/store/contract.hpp>

namespace idem::detail {

struct redis_reply_free {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};
using redis_reply = std::unique_ptr<redisReply, redis_reply_free>;

inline std::string_view reply_text(const redisReply* reply) noexcept {
  if (reply == nullptr || reply->str == nullptr) return {};
  return {reply->str, reply->len};
}

// Decoding what the scripts answer: a record's fields as the scripts store them (decimal fence
// and nanosecond times, "c" for completed, the fingerprint and the bytes as they were given).
// Free functions so that the fuzz target (tests/fuzz/redis_record_fuzz.cpp) reaches them
// without a server.
inline std::uint64_t redis_fence_of(const redisReply* reply) {
  if (reply->type == REDIS_REPLY_INTEGER) return static_cast<std::uint64_t>(reply->integer);
  std::uint64_t value = 0;
  const std::string_view text = reply_text(reply);
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

inline store_time redis_time_of(const redisReply* reply) {
  std::int64_t nanoseconds = 0;
  const std::string_view text = reply_text(reply);
  std::from_chars(text.data(), text.data() + text.size(), nanoseconds);
  return store_time{
      std::chrono::duration_cast<store_time::duration>(std::chrono::nanoseconds{nanoseconds})};
}

inline digest redis_digest_of(const redisReply* reply) {
  const std::string_view bytes = reply_text(reply);
  return digest{std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size())};
}

// {n, s, f, c, l, e, v, r}
inline record redis_record_of(std::span<redisReply*> fields) {
  record out;
  out.fence = redis_fence_of(fields[0]);
  out.state = reply_text(fields[1]) == "c" ? record_state::completed : record_state::in_progress;
  out.fingerprint = redis_digest_of(fields[2]);
  out.created_at = redis_time_of(fields[3]);
  out.lease_until = redis_time_of(fields[4]);
  out.expires_at = redis_time_of(fields[5]);
  out.response = reply_text(fields[6]);
  out.recovery = reply_text(fields[7]);
  return out;
}

}  // namespace idem::detail

#endif  // IDEM_STORE_REDIS_DETAIL_REPLY_HPP
