// Random sources for the policies that need chance: jittered backoff and key generation.
//
// A retrying object owns 256 bits of seed material. Each logical operation gets its own engine,
// seeded from that material and a counter unique to the operation, so operations on different
// threads never share engine state (no lock, no data race), and a test that fixes the seed sees
// the same delays and keys every run. The material is 256 bits, not one 64-bit word, because
// idempotency keys come from these engines: keys made by different processes must not collide
// even across billions of operations, which a 64-bit seed cannot promise (the birthday bound of
// 2^64 is reached at about 2^32 operations).
#ifndef IDEM_CORE_POLICY_RANDOM_HPP
#define IDEM_CORE_POLICY_RANDOM_HPP

#include <array>
#include <bit>
#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <idem/core/detail/entropy.hpp>

namespace idem {

/// The seed of one engine: 256 bits.
struct random_seed {
  std::array<std::uint64_t, 4> words{};
};

namespace detail {

/// std::uniform_random_bit_generator, word for word as the standard defines it
/// ([rand.req.urng]); spelled out here because only <random> declares it, and <random> would
/// cost every build that includes idem about a quarter of its baseline compile time.
template <class G>
concept uniform_random_bit_generator =
    std::invocable<G&> && std::unsigned_integral<std::invoke_result_t<G&>> && requires {
  { G::min() } -> std::same_as<std::invoke_result_t<G&>>;
  { G::max() } -> std::same_as<std::invoke_result_t<G&>>;
  requires std::bool_constant<(G::min() < G::max())>::value;
};

}  // namespace detail

/// What a `random` policy must be: a standard uniform random bit generator over 64-bit words
/// that can be constructed from an idem::random_seed (idem::xoshiro256ss is; a standard engine
/// needs a small wrapper whose constructor feeds it the four words).
template <class R>
concept RandomSource = detail::uniform_random_bit_generator<R> &&
                       std::constructible_from<R, const random_seed&> &&
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

  /// Uses the four words as the state; the all-zero state, the one xoshiro cannot leave, is
  /// replaced by the expansion of seed 0.
  constexpr explicit xoshiro256ss(const random_seed& seed) noexcept {
    std::uint64_t any = 0;
    for (std::size_t i = 0; i < 4; ++i)
      any |= (state_[i] = seed.words[i]);
    if (any == 0) *this = xoshiro256ss(std::uint64_t{0});
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

/// 256 bits expanded from one 64-bit value, for tests that want to replay.
constexpr random_seed seed_from(std::uint64_t value) noexcept {
  random_seed seed;
  for (auto& word : seed.words)
    word = detail::splitmix64(value);
  return seed;
}

/// 256 bits nobody chose, from the operating system's random source (getentropy where the
/// platform has it, else std::random_device): what production objects use, so that keys and
/// jitter differ between processes. Throws std::system_error if the system has none to give.
inline random_seed nondeterministic_seed() {
  random_seed seed;
  detail::fill_with_entropy(seed.words.data(), seed.words.size());
  return seed;
}

}  // namespace idem

#endif  // IDEM_CORE_POLICY_RANDOM_HPP
