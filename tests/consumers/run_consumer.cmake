# Configures, builds and runs one consumer project, as a user would: cmake -P run_consumer.cmake
#
#   -D CONSUMER_SOURCE=<dir>  -D CONSUMER_BINARY=<dir>  -D GENERATOR=<name>
#   -D MAKE_PROGRAM=<path>    -D CXX_COMPILER=<path>
#   -D INSTALL_FROM=<idem build dir> -D INSTALL_PREFIX=<dir>   optional: cmake --install first,
#                                                             and find idem in that prefix
#   -D CACHE_ARGS=<-DX=y;...>                                 optional
#
# Every run starts from empty directories, so a stale install or cache cannot make it pass.
cmake_minimum_required(VERSION 3.20)

include(${CMAKE_CURRENT_LIST_DIR}/run.cmake)

file(REMOVE_RECURSE ${CONSUMER_BINARY})
set(configure_args -S ${CONSUMER_SOURCE} -B ${CONSUMER_BINARY} -G ${GENERATOR}
                   -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release ${CACHE_ARGS})
if(MAKE_PROGRAM)
  list(APPEND configure_args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()

if(INSTALL_FROM)
  file(REMOVE_RECURSE ${INSTALL_PREFIX})
  run(${CMAKE_COMMAND} --install ${INSTALL_FROM} --prefix ${INSTALL_PREFIX})
  # Only the fresh install may satisfy find_package: no user or system package registry.
  list(APPEND configure_args -DCMAKE_PREFIX_PATH=${INSTALL_PREFIX}
       -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
endif()

run(${CMAKE_COMMAND} ${configure_args})
run(${CMAKE_COMMAND} --build ${CONSUMER_BINARY})
run(${CONSUMER_BINARY}/consumer)
