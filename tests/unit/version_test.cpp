#include <catch2/catch.hpp>
#include <idem/idem.hpp>

TEST_CASE("the version number encodes major, minor and patch") {
  CHECK(idem::version ==
        IDEM_VERSION_MAJOR * 10000 + IDEM_VERSION_MINOR * 100 + IDEM_VERSION_PATCH);
}
