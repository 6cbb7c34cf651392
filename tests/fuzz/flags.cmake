# NW_FUZZ: every C file of the tree is compiled for libFuzzer (coverage, no main) with
# AddressSanitizer and UndefinedBehaviorSanitizer; the fuzz targets link libFuzzer itself.
if(NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "NW_FUZZ needs clang (libFuzzer): configure with -DCMAKE_C_COMPILER=clang "
                      "(this tree uses ${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER})")
endif()
set(NW_FUZZ_C_FLAGS -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer -g)
add_compile_options(${NW_FUZZ_C_FLAGS})
add_link_options(-fsanitize=address,undefined)
# The project's gcc flags include warnings clang does not know (-Wno-format-truncation).
add_compile_options(-Wno-unknown-warning-option)
