// What every fuzz target shares: a property check that stops the run, and a reader that splits
// the fuzzer's bytes into the several values one input needs.
//
// A target is one function, LLVMFuzzerTestOneInput, that must return normally for every input.
// A broken property calls fuzz_require, which prints what broke and aborts: libFuzzer then saves
// the input as a crash artifact, and replay_main (the ordinary-build driver) fails its test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace idem_fuzz {

// Exact arithmetic for the reference models (a delay of up to 2^63 ns times ten, a gap between
// two such times). __extension__ keeps -Wpedantic quiet about the GNU type.
__extension__ typedef __int128 wide_int;

inline void fuzz_require(bool holds, const char* property) {
  if (holds) return;
  std::fprintf(stderr, "fuzz property broken: %s\n", property);
  std::abort();
}

// Takes values from the front of the input; once it runs dry every value is empty or zero, so a
// short input is still a valid (if dull) case.
class input_reader {
 public:
  input_reader(const std::uint8_t* data, std::size_t size) noexcept
      : rest_(reinterpret_cast<const char*>(data), size) {}

  std::uint8_t byte() noexcept {
    if (rest_.empty()) return 0;
    const auto value = static_cast<std::uint8_t>(rest_.front());
    rest_.remove_prefix(1);
    return value;
  }

  std::uint64_t u64() noexcept {
    std::uint64_t value = 0;
    for (int i = 0; i < 8; ++i)
      value = (value << 8) | byte();
    return value;
  }

  // A piece of the input: a length byte, then that many bytes (fewer when the input ends).
  std::string_view piece() noexcept { return take(byte()); }

  std::string_view take(std::size_t count) noexcept {
    const std::string_view out = rest_.substr(0, count);
    rest_.remove_prefix(out.size());
    return out;
  }

  std::string_view rest() noexcept { return take(rest_.size()); }
  bool empty() const noexcept { return rest_.empty(); }

 private:
  std::string_view rest_;
};

}  // namespace idem_fuzz
