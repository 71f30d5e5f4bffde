// For the durable stores' fault tests: the message of the store_error(unavailable) an operation
// throws.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include <idem/store/contract.hpp>

namespace idem::testing {

/// Runs `operation`; answers the message of the store_error it throws, checking that its
/// failure is `unavailable`. Fails the test when it throws nothing.
template <class Operation>
std::string unavailable_message_of(Operation&& operation) {
  try {
    operation();
  } catch (const store_error& error) {
    CHECK(error.failure() == store_failure::unavailable);
    return error.what();
  }
  FAIL("the operation did not throw store_error");
  return {};
}

}  // namespace idem::testing
