# What idem's own configurations need from the system, and the Debian package that provides each
# part. Only idem's own builds (tests, benchmarks, examples, fuzz targets, and a configure with
# IDEM_REQUIRE_ADAPTERS) use it; a consumer's find_package never loads it.
#
#   idem_requires(COMPONENT...)   this configuration needs COMPONENT (written, with its package,
#                                 into <build>/idem-required-packages.txt)
#   idem_missing(COMPONENT WHY)   stops the configure: COMPONENT was not found, WHY needs it; the
#                                 message names the Debian package that provides it
#
# scripts/lib/packages.sh installs these packages per purpose; tests/scripts/packages_test.py
# configures each script's configurations and checks that the script installs every package the
# configure wrote down, so a script can never configure what it did not install.

# component -> Debian package(s), and what the component is, for the messages.
set(_idem_component_packages
    "g++|g++|the GNU C++ compiler"
    "clang|clang|the Clang C++ compiler"
    "ninja|ninja-build|the Ninja build tool"
    "pkg-config|pkg-config|pkg-config, which finds libpq, hiredis, cpp-httplib and gRPC"
    "python3|python3|Python 3, which runs the test and benchmark tools"
    "sqlite|libsqlite3-dev|the SQLite store's client library (idem::sqlite)"
    "postgres|libpq-dev|the PostgreSQL store's client library, libpq (idem::postgres)"
    "redis|libhiredis-dev|the Redis store's client library, hiredis (idem::redis)"
    "httplib|libcpp-httplib-dev|cpp-httplib, for the HTTP binding (idem::httplib)"
    "prometheus|prometheus-cpp-dev|prometheus-cpp, for the Prometheus observer (idem::prometheus)"
    "grpc|libgrpc++-dev libprotobuf-dev|gRPC C++ and protobuf, for the gRPC binding (idem::grpc)"
    "asio|libboost1.81-dev|Boost.Asio and Beast 1.81, for the asynchronous drivers (idem::asio)"
    "asio_standalone|libasio-dev|standalone Asio, for the asynchronous drivers without Boost (idem::asio_standalone)"
    "catch2|catch2|Catch2 v2, the test framework"
    "rapidcheck|librapidcheck-dev|RapidCheck, for the model tests"
    "openssl|libssl-dev|OpenSSL's libcrypto, the SHA-256 peer of the known-answer tests"
    "xxhash|libxxhash-dev|libxxhash, the XXH3 peer of the known-answer tests"
    "nlohmann_json|nlohmann-json3-dev|nlohmann-json, for the HTTP tests, the demo and the benchmarks"
    "protoc|protobuf-compiler|protoc, which compiles the gRPC tests' service"
    "grpc_cpp_plugin|protobuf-compiler-grpc|grpc_cpp_plugin, which compiles the gRPC tests' service"
    "postgresql|postgresql|the PostgreSQL server the tests start"
    "redis-server|redis-server|the Redis server the tests and the demo start"
    "git|git|git, for the A/B tools and their tests"
    "benchmark|libbenchmark-dev|Google Benchmark"
    "tbb|libtbb-dev|oneTBB, a benchmark peer"
    "absl|libabsl-dev|abseil, a benchmark peer"
    "libcuckoo|libcuckoo-dev|libcuckoo, a benchmark peer"
    "sanitizer_runtime|libclang-rt-14-dev|Clang's sanitizer and libFuzzer runtimes"
    "symbolizer|llvm-14|llvm-symbolizer, which puts function names and lines in sanitizer reports"
    "clang-tidy|clang-tidy|clang-tidy")

# _idem_component(COMPONENT PACKAGES_VAR WHAT_VAR)
function(_idem_component component packages_var what_var)
  foreach(entry IN LISTS _idem_component_packages)
    string(REPLACE "|" ";" fields "${entry}")
    list(GET fields 0 name)
    if(name STREQUAL component)
      list(GET fields 1 packages)
      list(GET fields 2 what)
      set(${packages_var}
          "${packages}"
          PARENT_SCOPE)
      set(${what_var}
          "${what}"
          PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "cmake/IdemPackages.cmake: no Debian package is known for '${component}'")
endfunction()

function(idem_requires)
  foreach(component IN LISTS ARGN)
    _idem_component(${component} packages what)  # an unknown component is an error at once
    set_property(GLOBAL APPEND PROPERTY IDEM_REQUIRED_COMPONENTS ${component})
  endforeach()
endfunction()

function(idem_missing component why)
  _idem_component(${component} packages what)
  message(
    FATAL_ERROR
      "idem: ${why} needs ${what}, which was not found. "
      "Install the Debian package: apt-get install ${packages} "
      "(idem's scripts install what scripts/lib/packages.sh lists).")
endfunction()

# Written at the end of the top-level CMakeLists.txt: one line per component this configuration
# required, "PACKAGE<TAB>COMPONENT" (a component of two packages gives two lines).
function(idem_write_required_packages file)
  get_property(components GLOBAL PROPERTY IDEM_REQUIRED_COMPONENTS)
  if(components)
    list(REMOVE_DUPLICATES components)
  endif()
  set(content "")
  foreach(component IN LISTS components)
    _idem_component(${component} packages what)
    string(REPLACE " " ";" packages "${packages}")
    foreach(package IN LISTS packages)
      string(APPEND content "${package}\t${component}\n")
    endforeach()
  endforeach()
  file(
    CONFIGURE
    OUTPUT ${file}
    CONTENT "${content}"
    @ONLY)
endfunction()

# idem_pkg_config_target (installed too: the package config uses it for grpc++).
include(${CMAKE_CURRENT_LIST_DIR}/idemPkgConfigTarget.cmake)
