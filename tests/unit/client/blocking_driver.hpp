// The blocking driver of the shared client cases (retry_cases.hpp): the wrapper is
// idem::retrying itself.
#ifndef IDEM_TESTS_UNIT_CLIENT_BLOCKING_DRIVER_HPP
#define IDEM_TESTS_UNIT_CLIENT_BLOCKING_DRIVER_HPP

#include <idem/idem.hpp>

#include <utility>

struct blocking_driver {
  template <class Policies, class Call>
  static idem::retrying<Call, Policies> wrap(Call call,
                                             typename idem::retrying<Call, Policies>::options o) {
    return idem::retrying<Call, Policies>{std::move(call), std::move(o)};
  }
};
using retry_driver = blocking_driver;

#endif  // IDEM_TESTS_UNIT_CLIENT_BLOCKING_DRIVER_HPP
