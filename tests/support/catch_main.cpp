// The one translation unit that holds Catch2's main(); every test executable links it, so the
// (slow) Catch2 implementation is compiled once per build, not once per test file.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int status = session.applyCommandLine(argc, argv); status != 0) return status;
  // ctest runs each test case by its name (catch_discover_tests). A name CMake cannot carry
  // whole, one with a ';' (its list separator), arrives as specs that match no test case, and
  // Catch would run nothing and pass; as with --warn NoTests, a spec that matches nothing fails.
  session.configData().warnings = static_cast<Catch::WarnAbout::What>(
      session.configData().warnings | Catch::WarnAbout::NoTests);
  return session.run();
}
