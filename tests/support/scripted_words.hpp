// A RandomSource that hands out scripted words, for known-answer tests of what a policy does
// with each word it draws (uniform_up_to's rejection, the bits of a UUID).
#pragma once

#include <idem/idem.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace idem_test {

struct scripted_words {
  using result_type = std::uint64_t;
  template <class Seed>
  explicit scripted_words(const Seed&) {}
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }
  result_type operator()() { return words[next++ % words.size()]; }
  std::array<std::uint64_t, 2> words{};
  std::size_t next = 0;
};
static_assert(idem::RandomSource<scripted_words>);

}  // namespace idem_test
