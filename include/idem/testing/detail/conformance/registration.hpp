// Which conformance cases a suite registers. With IDEM_TESTING_CONCURRENCY_ONLY defined before a
// suite is included, only its cases tagged [concurrency] are registered, and so compiled: a
// build that runs those alone (a ThreadSanitizer build) then spends no time compiling the rest.
// Without it, every case is registered. Included by the suites in idem/testing/.
#ifndef IDEM_TESTING_DETAIL_CONFORMANCE_REGISTRATION_HPP
#define IDEM_TESTING_DETAIL_CONFORMANCE_REGISTRATION_HPP

// IDEM_CONFORMANCE_SERIAL(case): the registration of a case not tagged [concurrency].
#if defined(IDEM_TESTING_CONCURRENCY_ONLY)
#define IDEM_CONFORMANCE_SERIAL(...)
#else
#define IDEM_CONFORMANCE_SERIAL(...) __VA_ARGS__
#endif

#endif  // IDEM_TESTING_DETAIL_CONFORMANCE_REGISTRATION_HPP
