// Heap allocations counted across the benchmark binary, for the allocs_per_op counters.
#pragma once

#include <cstddef>

namespace idem_bench {

/// Global operator new calls that succeeded on this thread so far.
std::size_t allocations() noexcept;

}  // namespace idem_bench
