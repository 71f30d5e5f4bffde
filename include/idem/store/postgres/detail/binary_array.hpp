// One-dimensional arrays in PostgreSQL's binary format (array_recv), the way a batch travels in
// one parameter: the outbox reader's settlements (outbox_reader.hpp) and the store's batched
// claims and completions (batch.hpp) send a whole batch as a few arrays, unnested by one
// statement, so a batch costs one round trip however large it is.
#ifndef IDEM_STORE_POSTGRES_DETAIL_BINARY_ARRAY_HPP
#define IDEM_STORE_POSTGRES_DETAIL_BINARY_ARRAY_HPP

#include <libpq-fe.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/store/postgres/detail/wire.hpp>

namespace idem::detail::postgres {

inline constexpr Oid int4_oid = 23;
inline constexpr Oid bytea_array_oid = 1001;
inline constexpr Oid text_array_oid = 1009;
inline constexpr Oid int8_array_oid = 1016;

// The array's layout: the number of dimensions, a has-nulls flag, the element type, the length
// and lower bound, then each element as a length (-1 for NULL) and its bytes; integers
// big-endian. Elements are int8 (add(int64)), bytes or text (add(string_view)) or NULL.
class binary_array {
 public:
  explicit binary_array(Oid element) : element_(element) {}

  binary_array& add(std::int64_t value) {
    put(8);
    std::array<char, 8> raw{};
    put_int8(raw, value);
    body_.append(raw.data(), raw.size());
    ++count_;
    return *this;
  }
  binary_array& add(std::string_view bytes) {
    put(static_cast<std::uint32_t>(bytes.size()));
    body_.append(bytes);
    ++count_;
    return *this;
  }
  binary_array& add(const digest& value) {
    return add(std::string_view{reinterpret_cast<const char*>(value.data()), value.size()});
  }
  binary_array& add_null() {
    put(0xffffffffU);  // a length of -1
    has_nulls_ = true;
    ++count_;
    return *this;
  }
  std::size_t size() const noexcept { return count_; }
  Oid element() const noexcept { return element_; }

  // The whole value, ready to be a binary parameter. No elements: zero dimensions, which is
  // how PostgreSQL writes an empty array.
  std::string bytes() const {
    std::string out;
    out.reserve(20 + body_.size());
    const auto put_to = [&out](std::uint32_t value) {
      for (int shift = 24; shift >= 0; shift -= 8)
        out += static_cast<char>((value >> shift) & 0xff);
    };
    put_to(count_ == 0 ? 0 : 1);
    put_to(has_nulls_ ? 1 : 0);
    put_to(element_);
    if (count_ > 0) {
      put_to(static_cast<std::uint32_t>(count_));
      put_to(1);
    }
    out += body_;
    return out;
  }

 private:
  void put(std::uint32_t value) {
    for (int shift = 24; shift >= 0; shift -= 8)
      body_ += static_cast<char>((value >> shift) & 0xff);
  }

  Oid element_;
  std::string body_;
  std::size_t count_ = 0;
  bool has_nulls_ = false;
};

}  // namespace idem::detail::postgres

#endif  // IDEM_STORE_POSTGRES_DETAIL_BINARY_ARRAY_HPP
