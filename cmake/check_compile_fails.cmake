# Runs one compile-must-fail test: cmake -P check_compile_fails.cmake with
#
#   -D COMPILER=<c++ compiler>        -D SOURCE=<file.cpp>
#   -D INCLUDE_DIRS=<dir;dir>         -D MODE=fail|compile (default fail)
#   -D DEFINES=<NAME;NAME=value>      optional
#
# MODE fail:    passes only if compiling SOURCE fails AND the compiler's output matches every
#               `// expect: <regex>` line at the top of SOURCE (CMake regex syntax). Failing for
#               another reason — a typo, a missing include — is a test failure, not a pass.
#               A `// expect-first: <regex>` line must match the FIRST line of the output that
#               says "error:", for diagnostics whose sentence must come before anything else.
# MODE compile: passes only if SOURCE compiles (the control variant of a compile_fail test).
cmake_minimum_required(VERSION 3.20)

foreach(var COMPILER SOURCE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_compile_fails.cmake: -D ${var}=... is required")
  endif()
endforeach()
if(NOT DEFINED MODE)
  set(MODE fail)
endif()

set(args -std=c++20 -fsyntax-only -fdiagnostics-color=never)
foreach(dir IN LISTS INCLUDE_DIRS)
  list(APPEND args -I${dir})
endforeach()
foreach(define IN LISTS DEFINES)
  list(APPEND args -D${define})
endforeach()

# ASCII quotes and English text in diagnostics, whatever the caller's locale.
set(ENV{LC_ALL} C)
execute_process(
  COMMAND ${COMPILER} ${args} ${SOURCE}
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)

if(MODE STREQUAL "compile")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "control variant of ${SOURCE} must compile, but did not:\n${output}")
  endif()
  message(STATUS "control variant of ${SOURCE} compiles, as it must")
  return()
endif()

file(STRINGS ${SOURCE} expectations REGEX "^// expect: ")
file(STRINGS ${SOURCE} first_expectations REGEX "^// expect-first: ")
if(NOT expectations AND NOT first_expectations)
  message(FATAL_ERROR "${SOURCE} has no `// expect: <regex>` line: "
                      "a compile-fail test must say which diagnostic it expects")
endif()

if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but it must not:\n${output}")
endif()

foreach(line IN LISTS expectations)
  string(REGEX REPLACE "^// expect: " "" regex "${line}")
  if(NOT output MATCHES "${regex}")
    message(FATAL_ERROR "${SOURCE} failed to compile, but not with the expected diagnostic.\n"
                        "expected (regex): ${regex}\n" "compiler output:\n${output}")
  endif()
  message(STATUS "diagnostic matches: ${regex}")
endforeach()

if(first_expectations)
  # The first line that reports an error, whatever "In instantiation of" notes come before it.
  string(REGEX MATCH "[^\n]*error:[^\n]*" first_error "${output}")
  foreach(line IN LISTS first_expectations)
    string(REGEX REPLACE "^// expect-first: " "" regex "${line}")
    if(NOT first_error MATCHES "${regex}")
      message(FATAL_ERROR "${SOURCE}: the first error is not the expected one.\n"
                          "expected first (regex): ${regex}\n" "first error: ${first_error}\n"
                          "compiler output:\n${output}")
    endif()
    message(STATUS "first error matches: ${regex}")
  endforeach()
endif()
