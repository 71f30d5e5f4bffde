// postgres_store's side of libpq: handles owned by unique_ptr, the binary format its
// statements speak (big-endian integers, bytea), and the decoding of a record from a result.
// Free functions so that the fuzz target (tests/fuzz/postgres_record_fuzz.cpp) reaches them
// without a server.
#ifndef IDEM_STORE_POSTGRES_DETAIL_WIRE_HPP
#define IDEM_STORE_POSTGRES_DETAIL_WIRE_HPP

#include <libpq-fe.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/store/contract.hpp>

namespace idem::detail::postgres {

struct connection_closer {
  void operator()(PGconn* connection) const noexcept { PQfinish(connection); }
};
using connection_ptr = std::unique_ptr<PGconn, connection_closer>;
struct result_clearer {
  void operator()(PGresult* result) const noexcept { PQclear(result); }
};
using result_ptr = std::unique_ptr<PGresult, result_clearer>;

// Parameter and column types, by OID (pg_type.h is a server header).
inline constexpr Oid bool_oid = 16;
inline constexpr Oid bytea_oid = 17;
inline constexpr Oid int8_oid = 20;
inline constexpr Oid text_oid = 25;
inline constexpr Oid int2_oid = 21;

// Binary wire format: integers are big-endian.
inline void put_int8(std::array<char, 8>& out, std::int64_t value) noexcept {
  auto bits = static_cast<std::uint64_t>(value);
  for (int i = 7; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>(bits & 0xff);
    bits >>= 8;
  }
}
inline std::int64_t get_int(const PGresult* result, int row, int column) noexcept {
  const auto* bytes = reinterpret_cast<const unsigned char*>(PQgetvalue(result, row, column));
  const int length = PQgetlength(result, row, column);
  std::uint64_t bits = 0;
  for (int i = 0; i < length; ++i)
    bits = (bits << 8) | bytes[i];
  // Sign-extend the narrower types (int2).
  if (length < 8 && length > 0 && (bytes[0] & 0x80) != 0) bits |= ~std::uint64_t{0} << (8 * length);
  return static_cast<std::int64_t>(bits);
}
inline std::string_view get_bytes(const PGresult* result, int row, int column) noexcept {
  return {PQgetvalue(result, row, column),
          static_cast<std::size_t>(PQgetlength(result, row, column))};
}

inline std::int64_t to_nanoseconds(store_time time) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}
inline store_time from_nanoseconds(std::int64_t nanoseconds) noexcept {
  return store_time{
      std::chrono::duration_cast<store_time::duration>(std::chrono::nanoseconds{nanoseconds})};
}

// Record states as stored: a released record is a tombstone that keeps its fence.
inline constexpr std::int64_t completed_state = 1;
inline constexpr std::int64_t released_state = 2;

// Reads fence, fingerprint, state, created_at, lease_until, expires_at, response, recovery from
// column `first` on, in the binary format every statement of the store asks for. A free function
// so that the fuzz target (tests/fuzz/postgres_record_fuzz.cpp) reaches it without a server.
inline void read_record(const PGresult* result, int row, int first, record& out) {
  out.fence = static_cast<std::uint64_t>(get_int(result, row, first));
  const std::string_view print = get_bytes(result, row, first + 1);
  out.fingerprint = digest{std::span<const std::uint8_t>{
      reinterpret_cast<const std::uint8_t*>(print.data()), print.size()}};
  out.state = get_int(result, row, first + 2) == completed_state ? record_state::completed
                                                                 : record_state::in_progress;
  out.created_at = from_nanoseconds(get_int(result, row, first + 3));
  out.lease_until = from_nanoseconds(get_int(result, row, first + 4));
  out.expires_at = from_nanoseconds(get_int(result, row, first + 5));
  out.response = get_bytes(result, row, first + 6);
  out.recovery = get_bytes(result, row, first + 7);
}

// Up to eight parameters of one prepared statement, in binary format. A null value is SQL NULL:
// that is how the server-time mode leaves `now` to the server.
class parameters {
 public:
  parameters& bytes(std::string_view value) noexcept {
    // A zero-length non-null value must still be a valid pointer: "" is not SQL NULL.
    values_[count_] = value.empty() ? "" : value.data();
    lengths_[count_] = static_cast<int>(value.size());
    ++count_;
    return *this;
  }
  parameters& bytes(const digest& value) noexcept {
    return bytes(std::string_view{reinterpret_cast<const char*>(value.data()), value.size()});
  }
  parameters& int8(std::int64_t value) noexcept {
    put_int8(integers_[count_], value);
    values_[count_] = integers_[count_].data();
    lengths_[count_] = 8;
    ++count_;
    return *this;
  }
  parameters& null() noexcept {
    values_[count_] = nullptr;
    lengths_[count_] = 0;
    ++count_;
    return *this;
  }
  int count() const noexcept { return static_cast<int>(count_); }
  const char* const* values() const noexcept { return values_.data(); }
  const int* lengths() const noexcept { return lengths_.data(); }
  static const int* formats() noexcept {
    static constexpr std::array<int, 8> binary{1, 1, 1, 1, 1, 1, 1, 1};
    return binary.data();
  }

 private:
  std::array<const char*, 8> values_{};
  std::array<int, 8> lengths_{};
  std::array<std::array<char, 8>, 8> integers_{};
  std::size_t count_ = 0;
};

}  // namespace idem::detail::postgres

#endif  // IDEM_STORE_POSTGRES_DETAIL_WIRE_HPP
