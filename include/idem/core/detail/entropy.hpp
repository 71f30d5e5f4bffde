// Bytes nobody chose, from the operating system: the seeds of production retrying objects and
// the memory store's bucketing key.
//
// Where the platform has <sys/random.h> (Linux, the BSDs, macOS), getentropy(3) reads the
// kernel's cryptographic generator directly; std::random_device on those platforms draws on
// the same source, but <random> costs a build that includes idem about a quarter of its
// baseline compile time, for one function. Elsewhere it falls back to std::random_device.
#ifndef IDEM_CORE_DETAIL_ENTROPY_HPP
#define IDEM_CORE_DETAIL_ENTROPY_HPP

#include <cstddef>
#include <cstdint>

#if __has_include(<sys/random.h>)
#include <sys/random.h>

#include <cerrno>
#include <system_error>
#else
#include <random>
#endif

namespace idem::detail {

/// Fills `words` with random bits from the operating system. Throws std::system_error when the
/// system has none to give (as std::random_device does).
inline void fill_with_entropy(std::uint64_t* words, std::size_t count) {
#if __has_include(<sys/random.h>)
  // getentropy gives at most 256 bytes a call, and either all it was asked for or an error.
  constexpr std::size_t words_per_call = 256 / sizeof(std::uint64_t);
  while (count > 0) {
    const std::size_t now = count < words_per_call ? count : words_per_call;
    if (getentropy(words, now * sizeof(std::uint64_t)) != 0) {
      throw std::system_error(errno, std::generic_category(),
                              "idem: getentropy could not supply random bytes");
    }
    words += now;
    count -= now;
  }
#else
  std::random_device device;
  for (std::size_t i = 0; i < count; ++i)
    words[i] = (static_cast<std::uint64_t>(device()) << 32) ^ device();
#endif
}

}  // namespace idem::detail

#endif  // IDEM_CORE_DETAIL_ENTROPY_HPP
