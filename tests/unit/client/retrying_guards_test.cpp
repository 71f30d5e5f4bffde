// Budgets and breakers through the blocking driver: the shared table of cases.
#include "unit/client/blocking_driver.hpp"

#include "unit/client/retry_guard_cases.hpp"
