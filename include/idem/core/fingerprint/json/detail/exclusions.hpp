// The JSON Pointers (RFC 6901) a canonical form leaves out, split into unescaped reference tokens.
#ifndef IDEM_CORE_FINGERPRINT_JSON_DETAIL_EXCLUSIONS_HPP
#define IDEM_CORE_FINGERPRINT_JSON_DETAIL_EXCLUSIONS_HPP

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <idem/core/detail/lazy.hpp>
#include <idem/core/fingerprint/json/document.hpp>

namespace idem {

namespace detail {

// ---------------------------------------------------------------------------------------------
// Exclusion: the excluded JSON Pointers (RFC 6901), split into unescaped reference tokens.

template <class Lazy = void>
class exclusion_set {
 public:
  struct token {
    std::uint32_t offset;  // into text_
    std::uint32_t length;
    bool wildcard;
    std::uint64_t array_index;  // not_an_index unless the token is an RFC 6901 array index
  };
  static constexpr std::uint64_t not_an_index = std::numeric_limits<std::uint64_t>::max();

  // The index of a pointer, in the order given.
  using pointer_index = std::uint32_t;

  explicit exclusion_set(std::span<const std::string> pointers) {
    // By index: a range-for would instantiate span's iterators wherever this header is included.
    for (std::size_t i = 0; i < pointers.size(); ++i)
      add(pointers[i]);
  }

  std::size_t size() const noexcept { return pointers_.size(); }
  std::size_t length(pointer_index pointer) const noexcept {
    return pointers_[pointer].token_count;
  }
  const token& token_at(pointer_index pointer, std::size_t depth) const noexcept {
    return tokens_[pointers_[pointer].first_token + depth];
  }
  bool matches_member(const token& t, std::string_view name) const noexcept {
    return t.wildcard || std::string_view(text_).substr(t.offset, t.length) == name;
  }
  static bool matches_element(const token& t, std::size_t index) noexcept {
    return t.wildcard || t.array_index == index;
  }

 private:
  [[noreturn]] static void reject(const std::string& pointer, const char* why) {
    throw std::invalid_argument("idem::canonicalize_json: excluded pointer \"" + pointer + "\" " +
                                why);
  }

  void add(const std::string& pointer) {
    if (pointer.empty()) {
      reject(pointer, "names the whole document, which cannot be left out");
    }
    if (pointer.front() != '/') {
      reject(pointer, "must start with '/' (RFC 6901; the URI fragment form is not accepted)");
    }
    const auto first = static_cast<std::uint32_t>(tokens_.size());
    std::size_t i = 1;
    for (;;) {
      const std::size_t begin = text_.size();
      bool escaped = false;
      for (; i < pointer.size() && pointer[i] != '/'; ++i) {
        if (pointer[i] != '~') {
          text_.push_back(pointer[i]);
          continue;
        }
        const char next = i + 1 < pointer.size() ? pointer[i + 1] : '\0';
        if (next != '0' && next != '1') reject(pointer, "has a '~' not followed by '0' or '1'");
        text_.push_back(next == '0' ? '~' : '/');
        escaped = true;
        ++i;
      }
      const std::string_view name = std::string_view(text_).substr(begin);
      tokens_.push_back(token{static_cast<std::uint32_t>(begin),
                              static_cast<std::uint32_t>(name.size()), !escaped && name == "*",
                              array_index(name)});
      if (i == pointer.size()) break;
      ++i;  // '/'
    }
    pointers_.push_back(
        tokens_of_pointer{first, static_cast<std::uint32_t>(tokens_.size() - first)});
  }

  // RFC 6901 §4: "0", or digits without a leading zero. ("-", the element after the last, never
  // names an existing one.)
  static std::uint64_t array_index(std::string_view name) noexcept {
    if (name.empty() || name.size() > 18 || (name.size() > 1 && name.front() == '0')) {
      return not_an_index;
    }
    std::uint64_t index = 0;
    for (const char c : name) {
      if (c < '0' || c > '9') return not_an_index;
      index = index * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return index;
  }

  struct tokens_of_pointer {
    std::uint32_t first_token;  // in tokens_
    std::uint32_t token_count;
  };

  std::string text_;
  std::vector<token> tokens_;
  std::vector<tokens_of_pointer> pointers_;
};

}  // namespace detail

}  // namespace idem

#endif  // IDEM_CORE_FINGERPRINT_JSON_DETAIL_EXCLUSIONS_HPP
