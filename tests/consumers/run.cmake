# run(<command> <args>...): prints the command, runs it, and stops the script if it fails. Shared
# by the consumer scripts (run_consumer.cmake, compiler_only.cmake).
function(run)
  string(REPLACE ";" " " printed "${ARGN}")
  message(STATUS "$ ${printed}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${printed}")
  endif()
endfunction()
