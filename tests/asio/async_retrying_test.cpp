// idem::async_retrying: the blocking retrying's specification, run through the asynchronous
// driver (the shared tables of cases), and what only the asynchronous driver has.
#include "asio/driver.hpp"

using retry_driver = test_net::async_driver;

#include "unit/client/retry_cases.hpp"
#include "unit/client/retry_guard_cases.hpp"
