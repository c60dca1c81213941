# mlfw_add_boost_test(<target> SOURCES ... [LIBS ...] [LABELS ...])
#
# Builds one Boost.Test executable (tests/main.cpp defines the module) and
# registers each BOOST_AUTO_TEST_SUITE found in its sources as its own CTest
# test named <target>.<Suite>, so `ctest -R Suite` runs exactly one suite.
function(mlfw_add_boost_test target)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${target} ${PROJECT_SOURCE_DIR}/tests/main.cpp ${ARG_SOURCES})
  # Test suites link the optional components too (the CUDA suites skip themselves without a GPU).
  target_link_libraries(${target} PRIVATE mlframework::mlframework mlframework::cuda mlframework::mpi
                                          Boost::unit_test_framework
                                          mlfw_build_flags ${ARG_LIBS})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/src)
  # MLFW_PRECOMPILE_HEADERS: Boost.Test's unit_test.hpp (about 500 headers) precompiled, so each
  # test file loads it instead of parsing it (15% of a test file's compile time under the
  # sanitizers; the rest is code generation). Each executable builds its own: a precompiled header
  # is only valid with the macros and flags it was built with, and those differ between the test
  # executables. tests/main.cpp defines BOOST_TEST_MODULE before it includes the header.
  if(MLFW_PRECOMPILE_HEADERS)
    target_precompile_headers(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:<boost/test/unit_test.hpp$<ANGLE-R>>)
    set_source_files_properties(${PROJECT_SOURCE_DIR}/tests/main.cpp PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  endif()
  set(suites "")
  foreach(source ${ARG_SOURCES})
    file(STRINGS ${source} lines REGEX "^BOOST_(AUTO|FIXTURE)_TEST_SUITE\\(")
    foreach(line ${lines})
      string(REGEX REPLACE "^BOOST_(AUTO|FIXTURE)_TEST_SUITE\\(([A-Za-z0-9_]+).*" "\\2" suite "${line}")
      list(APPEND suites ${suite})
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES suites)
  foreach(suite ${suites})
    add_test(NAME ${target}.${suite} COMMAND ${target} --run_test=${suite} --log_level=message)
    if(ARG_LABELS)
      set_tests_properties(${target}.${suite} PROPERTIES LABELS "${ARG_LABELS}")
    endif()
  endforeach()
endfunction()
