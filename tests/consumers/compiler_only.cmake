# Configures idem as the top-level project with every optional library hidden, as on a machine
# that has only a compiler and CMake, then installs it and builds the find_package consumer
# against that install: configuring and installing the library must need nothing else, and the
# tests and benchmarks must then be off rather than fail the configure step.
#
#   cmake -D SOURCE=<idem root> -D BINARY=<dir> -D CONSUMER_SOURCE=<dir> -D GENERATOR=<name>
#         -D MAKE_PROGRAM=<path> -D CXX_COMPILER=<path> -P compiler_only.cmake
cmake_minimum_required(VERSION 3.20)

include(${CMAKE_CURRENT_LIST_DIR}/run.cmake)

file(REMOVE_RECURSE ${BINARY})
set(hidden)
foreach(package IN ITEMS Catch2 rapidcheck OpenSSL benchmark TBB absl libcuckoo SQLite3 PkgConfig
                         nlohmann_json)
  list(APPEND hidden -DCMAKE_DISABLE_FIND_PACKAGE_${package}=ON)
endforeach()
set(common -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
if(MAKE_PROGRAM)
  list(APPEND common -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()

run(${CMAKE_COMMAND} -S ${SOURCE} -B ${BINARY}/idem ${common} ${hidden}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
file(STRINGS ${BINARY}/idem/CMakeCache.txt bench_line REGEX "^IDEM_BUILD_BENCH:")
if(NOT bench_line MATCHES "=OFF$")
  message(FATAL_ERROR "benchmarks are on without being asked for: ${bench_line}")
endif()
if(EXISTS ${BINARY}/idem/tests)
  message(FATAL_ERROR "tests were configured although Catch2 and the peers were hidden")
endif()

run(${CMAKE_COMMAND} --install ${BINARY}/idem --prefix ${BINARY}/prefix)
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${BINARY}/consumer ${common} -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${BINARY}/prefix -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
run(${CMAKE_COMMAND} --build ${BINARY}/consumer)
run(${BINARY}/consumer/consumer)
