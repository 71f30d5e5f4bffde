# Sourced by every script that builds or runs something: the Debian packages idem's scripts
# need, one list per purpose, and the one function that installs them.
#
#   idem_install NAME PURPOSE...   installs every package of the PURPOSEs that is missing, in ONE
#                                  apt-get command (NAME is the calling script, for messages)
#   idem_configure_uses ARGS...    declares one CMake configuration the script makes (its -D
#                                  arguments), for IDEM_PRINT_PACKAGES below
#
# One apt-get command matters: libasio-dev alone pulls Boost 1.74's libboost-dev, which
# conflicts with libboost1.81-dev, so two commands each remove what the other installed.
#
# With IDEM_PRINT_PACKAGES=1 in the environment, idem_install prints what the script would
# install ("packages: ...") and each configuration it declared ("configure: ARG<TAB>ARG..."),
# then ends the script with status 0, installing and building nothing. tests/scripts/
# packages_test.py uses it to check each script's list against what its configurations
# require (CMake writes that into each build tree: idem-required-packages.txt).
#
# Without dpkg (not Debian) it assumes the packages are there. Not root, it uses sudo; with
# neither, it stops the caller with the list of what is missing.

# The purposes. A script installs the union of the purposes it names.
# build: a g++ build of anything idem has, and ccache, which the scripts use where it is installed.
idem_packages_build=(g++ cmake ninja-build pkg-config python3 ccache)
# adapters: every client library and server library a configuration with
# IDEM_REQUIRE_ADAPTERS=ON requires (cmake/IdemPackages.cmake names the component each provides).
idem_packages_adapters=(libsqlite3-dev libpq-dev libhiredis-dev libcpp-httplib-dev
  prometheus-cpp-dev libgrpc++-dev libprotobuf-dev libboost1.81-dev libasio-dev)
# examples: the payments demo's programs and the Redis server its relay publishes to.
idem_packages_examples=(nlohmann-json3-dev redis-server)
# servers: the database servers the tests, the benchmarks and the demo's --store postgres start.
idem_packages_servers=(postgresql redis-server)
# tests: the test libraries, the gRPC code generators, and the tools the tests run (git for the
# A/B tool's test, patch for the mutants).
idem_packages_tests=(catch2 librapidcheck-dev libxxhash-dev libssl-dev nlohmann-json3-dev
  protobuf-compiler protobuf-compiler-grpc git patch)
# sanitizers: clang with its sanitizer and libFuzzer runtimes, clang-tidy, and llvm-symbolizer
# (package llvm-14), without which a sanitizer report has no function names or lines.
idem_packages_sanitizers=(clang clang-tidy libclang-rt-14-dev llvm-14)
# bench: Google Benchmark and the peers the benchmarks compare with.
idem_packages_bench=(libbenchmark-dev libxxhash-dev libssl-dev libcuckoo-dev libtbb-dev
  libabsl-dev nlohmann-json3-dev git)
# compilers: both, for the compile-cost measurement.
idem_packages_compilers=(g++ clang)
# plots: the performance report's and the hedging study's plots.
idem_packages_plots=(gnuplot-nox python3)
# ab: the A/B tools (two versions of the headers from git; Boost.Asio for the asynchronous
# wrapper's calls); callgrind: what counts instructions.
idem_packages_ab=(g++ git libboost1.81-dev)
idem_packages_callgrind=(valgrind)

idem_configurations=()

# idem_compiler_launcher: the CMake argument that puts ccache in front of the compiler, where it
# is installed (nothing otherwise). CCACHE_DIR, where set, says where its cache lives.
idem_compiler_launcher() {
  command -v ccache >/dev/null 2>&1 && echo "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  return 0
}

idem_configure_uses() {
  local IFS=$'\t'
  idem_configurations+=("$*")
}

# idem_packages_of PURPOSE...: the union, one per line, in first-named order.
idem_packages_of() {
  local purpose package
  local -A seen=()
  for purpose in "$@"; do
    declare -p "idem_packages_$purpose" >/dev/null 2>&1 || {
      echo "packages.sh: no purpose '$purpose'" >&2
      return 2
    }
    local -n list="idem_packages_$purpose"
    for package in "${list[@]}"; do
      [[ -n ${seen[$package]:-} ]] && continue
      seen[$package]=1
      echo "$package"
    done
    unset -n list
  done
}

idem_install() {
  local caller="$1"
  shift
  local wanted=() purpose
  for purpose in "$@"; do
    declare -p "idem_packages_$purpose" >/dev/null 2>&1 || {
      echo "$caller: packages.sh has no purpose '$purpose'" >&2
      exit 2
    }
  done
  mapfile -t wanted < <(idem_packages_of "$@")
  ((${#wanted[@]})) || { echo "$caller: no packages for '$*'" >&2; exit 2; }
  if [[ -n ${IDEM_PRINT_PACKAGES:-} ]]; then
    echo "packages: ${wanted[*]}"
    local configuration
    for configuration in "${idem_configurations[@]}"; do echo "configure: $configuration"; done
    exit 0
  fi
  idem_ensure_packages "$caller" "${wanted[@]}"
}

# idem_ensure_packages NAME PACKAGE...: the missing ones of PACKAGE..., in one apt-get command.
# A failed download is retried (a mirror's hiccup must not fail a run); a package that does not
# exist is named.
idem_ensure_packages() {
  local caller="$1"
  shift
  if ! command -v dpkg >/dev/null 2>&1; then
    echo "$caller: no dpkg here; assuming $* are installed" >&2
    return 0
  fi
  local missing=() package
  for package in "$@"; do
    dpkg -s "$package" 2>/dev/null | grep -q '^Status: install ok installed' || missing+=("$package")
  done
  ((${#missing[@]})) || return 0
  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || {
      echo "$caller: missing packages ${missing[*]}, and not root" >&2
      exit 1
    }
    sudo=(sudo)
  fi
  echo "== installing ${missing[*]}"
  local attempt
  for attempt in 1 2 3; do
    if "${sudo[@]}" apt-get update -q && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends "${missing[@]}"; then
      return 0
    fi
    echo "$caller: apt-get failed (attempt $attempt of 3)" >&2
    sleep $((attempt * 5))
  done
  echo "$caller: could not install ${missing[*]}" >&2
  exit 1
}
