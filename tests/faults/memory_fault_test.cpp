// The store failing at each step of the protocol, with memory_store behind the faults.
#include <catch2/catch.hpp>

#include <idem/store/memory.hpp>

#include "fault_matrix.hpp"

namespace {

struct memory_factory {
  idem::memory_store operator()() const {
    idem::memory_store::options bounds;
    bounds.expected_records = 16;
    return idem::memory_store{bounds};
  }
};

}  // namespace

IDEM_FAULT_MATRIX_TESTS("memory", memory_factory)
