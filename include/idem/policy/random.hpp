// Random sources for the policies that need chance: jittered backoff and key generation.
//
// A retrying object owns one seed. Each logical operation draws its own engine from that seed
// and a per-object counter, so operations on different threads never share engine state (no
// lock, no data race) and a test that fixes the seed sees the same delays and keys every run.
#pragma once

#include <bit>
#include <concepts>
#include <cstdint>
#include <limits>
#include <random>

namespace idem {

/// What a `random` policy must be: a standard uniform random bit generator over 64-bit words
/// that can be constructed from one 64-bit seed (std::mt19937_64 and idem::xoshiro256ss both are).
template <class R>
concept RandomSource = std::uniform_random_bit_generator<R> &&
                       std::constructible_from<R, std::uint64_t> &&
                       std::same_as<typename R::result_type, std::uint64_t> &&(R::min() == 0) &&
                       (R::max() == std::numeric_limits<std::uint64_t>::max());

namespace detail {

/// SplitMix64 (Steele, Lea, Flood 2014): turns any 64-bit value, even 0 or a counter, into a
/// well-mixed one. Used to expand a seed into engine state and to separate per-operation streams.
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// 64x64->128-bit products for exact bounded random numbers; __extension__ keeps -Wpedantic quiet
// about a type both GCC and Clang have on every 64-bit target.
__extension__ typedef unsigned __int128 uint128;

}  // namespace detail

/// xoshiro256** 1.0 (Blackman and Vigna): small, fast, statistically strong for simulation and
/// jitter. Not cryptographic: keys it generates are unique with overwhelming probability, but
/// guessable by someone who sees many of them. Use a cryptographic source where that matters.
class xoshiro256ss {
 public:
  using result_type = std::uint64_t;

  constexpr explicit xoshiro256ss(std::uint64_t seed) noexcept {
    // The state must not be all zero; SplitMix64 output for four consecutive steps never is.
    for (auto& word : state_)
      word = detail::splitmix64(seed);
  }

  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  constexpr result_type operator()() noexcept {
    const std::uint64_t result = std::rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = std::rotl(state_[3], 45);
    return result;
  }

 private:
  std::uint64_t state_[4]{};
};

/// A uniformly distributed integer in [0, bound] (both ends included), exactly uniform:
/// Lemire's multiply-and-reject method (ACM TOMS 2019), one multiplication in the common case.
template <RandomSource R>
constexpr std::uint64_t uniform_up_to(R& rng, std::uint64_t bound) noexcept {
  if (bound == std::numeric_limits<std::uint64_t>::max()) return rng();
  const std::uint64_t range = bound + 1;
  detail::uint128 product = static_cast<detail::uint128>(rng()) * range;
  auto low = static_cast<std::uint64_t>(product);
  if (low < range) {
    const std::uint64_t threshold = (0 - range) % range;
    while (low < threshold) {
      product = static_cast<detail::uint128>(rng()) * range;
      low = static_cast<std::uint64_t>(product);
    }
  }
  return static_cast<std::uint64_t>(product >> 64);
}

/// A seed nobody chose: for production objects whose jitter must differ between processes.
inline std::uint64_t nondeterministic_seed() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

}  // namespace idem
