# NW_FUZZ: jansson and inih compiled from Debian's sources with the fuzz flags, so that the
# fuzzers see (and the sanitizers check) the parsing done inside them. They stand in for the
# system's PkgConfig::JANSSON and PkgConfig::INIH; tests/fuzz/fetch-deps.sh says where the
# sources come from. Both are built once per build tree, at configure time.
set(NW_FUZZ_DEPS_DIR ${CMAKE_BINARY_DIR}/_deps)
execute_process(COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/fetch-deps.sh ${NW_FUZZ_DEPS_DIR}
                RESULT_VARIABLE fetch_rc)
if(fetch_rc)
  message(FATAL_ERROR "NW_FUZZ: tests/fuzz/fetch-deps.sh failed (${fetch_rc})")
endif()

# jansson with its own CMake build (it generates its config headers from probes).
list(JOIN NW_FUZZ_C_FLAGS " " jansson_flags)
set(jansson_install ${NW_FUZZ_DEPS_DIR}/jansson-install)
set(jansson_stamp "${CMAKE_C_COMPILER} ${jansson_flags}")
if(EXISTS ${jansson_install}/.numwatch-flags)
  file(READ ${jansson_install}/.numwatch-flags jansson_built_with)
else()
  set(jansson_built_with "")
endif()
if(NOT jansson_built_with STREQUAL jansson_stamp OR NOT EXISTS ${jansson_install}/lib/libjansson.a)
  message(STATUS "NW_FUZZ: building instrumented jansson in ${NW_FUZZ_DEPS_DIR}/jansson-build")
  file(REMOVE_RECURSE ${NW_FUZZ_DEPS_DIR}/jansson-build ${jansson_install})
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${NW_FUZZ_DEPS_DIR}/jansson -B ${NW_FUZZ_DEPS_DIR}/jansson-build
            -G ${CMAKE_GENERATOR} -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER} -DCMAKE_BUILD_TYPE=RelWithDebInfo
            "-DCMAKE_C_FLAGS=${jansson_flags}" -DCMAKE_INSTALL_PREFIX=${jansson_install}
            -DJANSSON_BUILD_SHARED_LIBS=OFF -DJANSSON_EXAMPLES=OFF
            -DJANSSON_WITHOUT_TESTS=ON -DJANSSON_BUILD_DOCS=OFF -Wno-dev
    OUTPUT_QUIET RESULT_VARIABLE jansson_rc)
  if(NOT jansson_rc)
    execute_process(COMMAND ${CMAKE_COMMAND} --build ${NW_FUZZ_DEPS_DIR}/jansson-build --target install
                            --parallel 2 OUTPUT_QUIET RESULT_VARIABLE jansson_rc)
  endif()
  if(jansson_rc OR NOT EXISTS ${jansson_install}/lib/libjansson.a)
    message(FATAL_ERROR "NW_FUZZ: building jansson failed (see ${NW_FUZZ_DEPS_DIR}/jansson-build)")
  endif()
  file(WRITE ${jansson_install}/.numwatch-flags "${jansson_stamp}")
endif()
add_library(PkgConfig::JANSSON STATIC IMPORTED GLOBAL)
set_target_properties(PkgConfig::JANSSON PROPERTIES IMPORTED_LOCATION ${jansson_install}/lib/libjansson.a
                                                    INTERFACE_INCLUDE_DIRECTORIES ${jansson_install}/include)

# inih is one file. Debian's shared library is built with INI_HANDLER_LINENO=1 but installs a
# header without it (and so calls config.c's four-argument handler with five); here ini.c is
# compiled as its header declares the handler, which UBSan's function-type check can accept.
add_library(nw_fuzz_inih STATIC ${NW_FUZZ_DEPS_DIR}/inih/ini.c)
target_include_directories(nw_fuzz_inih SYSTEM PUBLIC ${NW_FUZZ_DEPS_DIR}/inih)
target_compile_options(nw_fuzz_inih PRIVATE -w)
add_library(PkgConfig::INIH ALIAS nw_fuzz_inih)
