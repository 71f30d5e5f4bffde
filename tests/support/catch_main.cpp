// The one translation unit that holds Catch2's main(); every test executable links it, so the
// (slow) Catch2 implementation is compiled once per build, not once per test file.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
