// Fuzz target: how postgres_store decodes a record from a result row (binary format: big-endian
// int8 and int2, bytea as its bytes). The PGresult is built with libpq's own result-building
// calls (PQmakeEmptyPGresult, PQsetResultAttrs, PQsetvalue), so no server is involved; the
// decoder is the store's own (detail::postgres::read_record).
//
// The first input byte picks a mode:
//  * raw: eight columns of any length (NULL included) are decoded; that must not crash or read
//    outside the values, whatever their sizes;
//  * encoded: a record's fields are written as the server sends them (int8 through the store's
//    own put_int8, int2 for the state) and must decode to exactly those values.
#include <idem/store/postgres.hpp>

#include <libpq-fe.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"

namespace {

using idem_fuzz::fuzz_require;
namespace pg = idem::detail::postgres;

// One row of eight binary columns; a value given as nullptr is SQL NULL.
pg::result_ptr make_row(const std::array<std::string, 8>& values, const std::array<bool, 8>& null) {
  pg::result_ptr result(PQmakeEmptyPGresult(nullptr, PGRES_TUPLES_OK));
  fuzz_require(result != nullptr, "an empty result is made");
  static char names[8][4] = {"n", "f", "s", "c", "l", "e", "v", "r"};
  std::array<PGresAttDesc, 8> columns{};
  for (std::size_t i = 0; i < 8; ++i) {
    columns[i].name = names[i];
    columns[i].format = 1;  // binary
    columns[i].typlen = -1;
    columns[i].atttypmod = -1;
  }
  fuzz_require(PQsetResultAttrs(result.get(), 8, columns.data()) != 0, "the columns are set");
  for (std::size_t i = 0; i < 8; ++i) {
    std::string value = values[i];
    fuzz_require(PQsetvalue(result.get(), 0, static_cast<int>(i), value.data(),
                            null[i] ? -1 : static_cast<int>(value.size())) != 0,
                 "a value is set");
  }
  return result;
}

std::string int8(std::int64_t value) {
  std::array<char, 8> bytes{};
  pg::put_int8(bytes, value);
  return std::string(bytes.data(), bytes.size());
}

std::string int2(std::int16_t value) {
  const auto bits = static_cast<std::uint16_t>(value);
  return std::string{static_cast<char>(bits >> 8), static_cast<char>(bits & 0xff)};
}

void check_raw(idem_fuzz::input_reader& in) {
  std::array<std::string, 8> values;
  std::array<bool, 8> null{};
  for (std::size_t i = 0; i < 8; ++i) {
    const std::uint8_t shape = in.byte();
    null[i] = shape % 7 == 0;
    values[i] = std::string(in.take(shape % 24));
  }
  const pg::result_ptr row = make_row(values, null);
  idem::record decoded;
  pg::read_record(row.get(), 0, 0, decoded);
  fuzz_require(decoded.fingerprint.size() <= idem::digest::max_size,
               "a decoded fingerprint fits a digest");
  fuzz_require(decoded.response == (null[6] ? std::string() : values[6]) &&
                   decoded.recovery == (null[7] ? std::string() : values[7]),
               "bytea columns decode as their bytes");
}

void check_encoded(idem_fuzz::input_reader& in) {
  const auto fence = static_cast<std::int64_t>(in.u64());
  const auto state = static_cast<std::int16_t>(in.byte() % 3);
  const std::int64_t times[3] = {static_cast<std::int64_t>(in.u64()),
                                 static_cast<std::int64_t>(in.u64()),
                                 static_cast<std::int64_t>(in.u64())};
  const std::string fingerprint(in.take(in.byte() % (idem::digest::max_size + 1)));
  const std::string response(in.piece());
  const std::string recovery(in.rest());
  const pg::result_ptr row = make_row({int8(fence), fingerprint, int2(state), int8(times[0]),
                                       int8(times[1]), int8(times[2]), response, recovery},
                                      {});
  idem::record decoded;
  pg::read_record(row.get(), 0, 0, decoded);
  fuzz_require(decoded.fence == static_cast<std::uint64_t>(fence), "the fence decodes");
  fuzz_require(decoded.state == (state == pg::completed_state ? idem::record_state::completed
                                                              : idem::record_state::in_progress),
               "the state decodes");
  fuzz_require(decoded.fingerprint.size() == fingerprint.size() &&
                   std::string_view(reinterpret_cast<const char*>(decoded.fingerprint.data()),
                                    decoded.fingerprint.size()) == fingerprint,
               "the fingerprint decodes");
  fuzz_require(decoded.created_at == pg::from_nanoseconds(times[0]) &&
                   decoded.lease_until == pg::from_nanoseconds(times[1]) &&
                   decoded.expires_at == pg::from_nanoseconds(times[2]),
               "the times decode");
  fuzz_require(pg::to_nanoseconds(decoded.created_at) == times[0],
               "a time survives the trip through the clock's duration");
  fuzz_require(decoded.response == response && decoded.recovery == recovery,
               "the response and recovery bytes decode");
  // int2 sign extension: a negative state reads back negative, not as 65535-something.
  const pg::result_ptr negative = make_row({int2(-2), "", "", "", "", "", "", ""}, {});
  fuzz_require(pg::get_int(negative.get(), 0, 0) == -2, "int2 values are sign-extended");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  idem_fuzz::input_reader in(data, size);
  if (in.byte() % 2 == 0) {
    check_raw(in);
  } else {
    check_encoded(in);
  }
  return 0;
}
