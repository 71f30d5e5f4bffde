// What the durable stores' own tests build their requests from: the suite's start time and
// fingerprints told apart by a seed.
#pragma once

#include <chrono>
#include <cstdint>

#include <idem/core/fingerprint/digest.hpp>
#include <idem/store/contract.hpp>

namespace idem::testing {

/// 2026-01-01T00:00:00Z, as the conformance suite starts.
inline const store_time start{std::chrono::seconds{1767225600}};

/// A fingerprint of its own for each seed.
inline digest print(std::uint8_t seed) {
  const std::uint8_t bytes[16] = {seed, 1, 2, 3};
  return digest{bytes};
}

}  // namespace idem::testing
