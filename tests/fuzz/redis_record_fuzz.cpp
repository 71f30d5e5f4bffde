// Fuzz target: how redis_store decodes a record from its scripts' answers (the HMGET fields
// n, s, f, c, l, e, v, r). The answer is parsed from RESP bytes by hiredis's own reader, as it
// is off the wire, and handed to the store's decoders; no server is involved.
//
// The first input byte picks a mode:
//  * raw: the rest is RESP; any reply with at least eight elements is decoded, which must not
//    crash or read outside the reply, whatever the element types;
//  * fields: eight fields are built as RESP values of types the input picks (bulk string,
//    integer, nil, status, array) and decoded. When every field has the type and spelling the
//    scripts write (decimal fence and non-negative nanosecond times, "p" or "c", a fingerprint of
//    at most 32 bytes), the record decodes to exactly those values.
#include <idem/store/redis.hpp>

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "fuzz_support.hpp"

namespace {

using idem_fuzz::fuzz_require;

struct reader_free {
  void operator()(redisReader* reader) const noexcept { redisReaderFree(reader); }
};

// Whether `resp` may declare an array of more than 64 elements. hiredis 0.14's reader allocates
// the declared count before reading any element ("*800000000" asks for 6.4 GB) and has no limit
// to set; a record reply has 8 to 11 elements, so the harness skips such inputs rather than fuzz
// hiredis's allocator. Any '*' counts, not only one at a line's start: the reader skips the two
// bytes after a bulk string's payload without reading them, so a header can follow "\r\0".
bool declares_huge_array(std::string_view resp) {
  for (std::size_t at = resp.find('*'); at != std::string_view::npos; at = resp.find('*', at + 1)) {
    std::size_t digits = 0;
    while (at + 1 + digits < resp.size() && resp[at + 1 + digits] >= '0' &&
           resp[at + 1 + digits] <= '9')
      ++digits;
    if (digits > 2 || (digits == 2 && resp.substr(at + 1, 2) > "64")) return true;
  }
  return false;
}

// Parses one reply from `resp`; nullptr when the bytes are not (or not yet) a whole reply.
idem::detail::redis_reply parse(std::string_view resp) {
  const std::unique_ptr<redisReader, reader_free> reader(redisReaderCreate());
  fuzz_require(reader != nullptr, "a reader is made");
  if (redisReaderFeed(reader.get(), resp.data(), resp.size()) != REDIS_OK) return nullptr;
  void* reply = nullptr;
  if (redisReaderGetReply(reader.get(), &reply) != REDIS_OK) return nullptr;
  return idem::detail::redis_reply(static_cast<redisReply*>(reply));
}

void append_bulk(std::string& resp, std::string_view bytes) {
  resp += "$" + std::to_string(bytes.size()) + "\r\n";
  resp.append(bytes);
  resp += "\r\n";
}

// The decimal value `text` spells, when it is exactly the digits the scripts write.
template <class Integer>
bool decimal(std::string_view text, Integer& value) {
  if (text.empty() || text.size() > 19 || (text.size() > 1 && text.front() == '0')) return false;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
  }
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc{} && end == text.data() + text.size();
}

idem::store_time at(std::int64_t nanoseconds) {
  return idem::store_time{std::chrono::duration_cast<idem::store_time::duration>(
      std::chrono::nanoseconds{nanoseconds})};
}

void check_fields(idem_fuzz::input_reader& in) {
  std::string resp = "*8\r\n";
  std::string texts[8];
  bool as_written = true;  // every field the type the scripts answer with
  for (int i = 0; i < 8; ++i) {
    const std::uint8_t type = in.byte();
    std::string& text = texts[i];
    text = std::string(in.piece());
    switch (type % 8) {
      case 5:  // an integer reply
        resp += ":" + std::to_string(static_cast<std::int64_t>(in.u64())) + "\r\n";
        as_written = false;
        break;
      case 6:  // nil, or a status line (only printable bytes survive the reader)
        resp += (type & 8) != 0 ? std::string("$-1\r\n") : "+OK\r\n";
        as_written = false;
        break;
      case 7:  // an array where a string was expected
        resp += "*1\r\n";
        append_bulk(resp, text);
        as_written = false;
        break;
      default:
        append_bulk(resp, text);
        break;
    }
  }
  const idem::detail::redis_reply reply = parse(resp);
  fuzz_require(reply != nullptr && reply->type == REDIS_REPLY_ARRAY && reply->elements == 8,
               "the built reply parses");
  const idem::record decoded =
      idem::detail::redis_record_of(std::span<redisReply*>(reply->element, 8));

  std::uint64_t fence = 0;
  std::int64_t created = 0;
  std::int64_t lease = 0;
  std::int64_t expires = 0;
  if (!as_written || !decimal(texts[0], fence) || !(texts[1] == "p" || texts[1] == "c") ||
      texts[2].size() > idem::digest::max_size || !decimal(texts[3], created) ||
      !decimal(texts[4], lease) || !decimal(texts[5], expires)) {
    return;
  }
  fuzz_require(decoded.fence == fence, "the fence decodes");
  fuzz_require(decoded.state == (texts[1] == "c" ? idem::record_state::completed
                                                 : idem::record_state::in_progress),
               "the state decodes");
  fuzz_require(decoded.fingerprint.size() == texts[2].size() &&
                   std::string_view(reinterpret_cast<const char*>(decoded.fingerprint.data()),
                                    decoded.fingerprint.size()) == texts[2],
               "the fingerprint decodes");
  fuzz_require(decoded.created_at == at(created) && decoded.lease_until == at(lease) &&
                   decoded.expires_at == at(expires),
               "the times decode");
  fuzz_require(decoded.response == texts[6] && decoded.recovery == texts[7],
               "the response and recovery bytes decode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  idem_fuzz::input_reader in(data, size);
  if (in.byte() % 2 == 0) {
    const std::string_view resp = in.rest();
    // Only for these raw bytes: a reply the harness builds has a few elements, and its bulk
    // strings may hold any bytes, "*99" at a line start included.
    if (declares_huge_array(resp)) return 0;
    const idem::detail::redis_reply reply = parse(resp);
    if (reply != nullptr && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 8) {
      const idem::record decoded =
          idem::detail::redis_record_of(std::span<redisReply*>(reply->element, 8));
      fuzz_require(decoded.fingerprint.size() <= idem::digest::max_size,
                   "a decoded fingerprint fits a digest");
    }
    return 0;
  }
  check_fields(in);
  return 0;
}
