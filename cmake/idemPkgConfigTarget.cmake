# idem_pkg_config_target(PREFIX MODULE): what pkg_check_modules(PREFIX IMPORTED_TARGET GLOBAL
# MODULE) gives (PREFIX_FOUND and the target PkgConfig::PREFIX: MODULE's include directories,
# other compile flags and link line, in pkg-config's order), from two pkg-config calls whose
# answers are cached, for modules whose twenty calls cost too much: each of pkg_check_modules'
# calls about grpc++ walks its eighty abseil .pc files, 1.2 s of CPU a call, about 25 s a
# configure. Used by idem's own CMakeLists.txt and, installed beside it, by the package config
# (find_package(idem) loads the grpc component wherever it was installed).
function(idem_pkg_config_target prefix module)
  if(NOT DEFINED CACHE{${prefix}_PKG_CONFIG_LIBS})
    foreach(question IN ITEMS cflags libs)
      execute_process(
        COMMAND ${PKG_CONFIG_EXECUTABLE} --${question} ${module}
        OUTPUT_VARIABLE answer
        RESULT_VARIABLE status
        ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(NOT status EQUAL 0)
        set(${prefix}_FOUND
            FALSE
            PARENT_SCOPE)
        return()
      endif()
      separate_arguments(answer UNIX_COMMAND "${answer}")
      set(${question} "${answer}")
    endforeach()
    set(${prefix}_PKG_CONFIG_CFLAGS
        "${cflags}"
        CACHE INTERNAL "pkg-config --cflags ${module}")
    set(${prefix}_PKG_CONFIG_LIBS
        "${libs}"
        CACHE INTERNAL "pkg-config --libs ${module}")
  endif()
  set(includes)
  set(options)
  foreach(flag IN LISTS ${prefix}_PKG_CONFIG_CFLAGS)
    if(flag MATCHES "^-I(.+)$")
      list(APPEND includes "${CMAKE_MATCH_1}")
    else()
      list(APPEND options "${flag}")
    endif()
  endforeach()
  if(NOT TARGET PkgConfig::${prefix})
    add_library(PkgConfig::${prefix} INTERFACE IMPORTED GLOBAL)
    set_target_properties(
      PkgConfig::${prefix}
      PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${includes}"
                 INTERFACE_COMPILE_OPTIONS "${options}"
                 INTERFACE_LINK_LIBRARIES "${${prefix}_PKG_CONFIG_LIBS}")
  endif()
  set(${prefix}_FOUND
      TRUE
      PARENT_SCOPE)
endfunction()
