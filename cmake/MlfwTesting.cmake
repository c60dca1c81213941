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
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${MLFW_TEST_COMPILE_OPTIONS}>")
  # MLFW_PRECOMPILE_HEADERS: Boost.Test's unit_test.hpp (about 500 headers) precompiled, so each
  # test file loads it instead of parsing it (15% of a test file's compile time under the
  # sanitizers; the rest is code generation). Each executable builds its own: a precompiled header
  # is only valid with the macros and flags it was built with, and those differ between the test
  # executables. tests/main.cpp defines BOOST_TEST_MODULE before it includes the header.
  if(MLFW_PRECOMPILE_HEADERS)
    target_precompile_headers(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:<boost/test/unit_test.hpp$<ANGLE-R>>)
    set_source_files_properties(${PROJECT_SOURCE_DIR}/tests/main.cpp PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  endif()
  # MLFW_UNITY_TESTS: the test files are compiled in batches (cmake/MlfwOptions.cmake). main.cpp,
  # which defines BOOST_TEST_MODULE before it includes Boost.Test, stays on its own, and so do the
  # library sources a target compiles in (added after this call): only the test files are written
  # to be batched together (CMake already leaves out any source with its own COMPILE_OPTIONS).
  if(MLFW_UNITY_TESTS)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${MLFW_UNITY_TESTS_BATCH_SIZE})
    set_source_files_properties(${PROJECT_SOURCE_DIR}/tests/main.cpp PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    # (A deferred call reads its variables when it runs: the target's name is written in now.)
    cmake_language(EVAL CODE "cmake_language(DEFER CALL mlfw_unity_only_test_files [[${target}]])")
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

# Leaves every source of <target> that is not a test file (not under tests/) out of its unity
# batches. Called at the end of the directory that made the target, after its target_sources().
function(mlfw_unity_only_test_files target)
  get_target_property(sources ${target} SOURCES)
  foreach(source ${sources})
    get_filename_component(path ${source} ABSOLUTE)
    if(NOT path MATCHES "^${PROJECT_SOURCE_DIR}/tests/")
      set_source_files_properties(${path} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
endfunction()
