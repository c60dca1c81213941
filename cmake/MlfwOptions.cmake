# Build options. Tests, samples, benchmarks and install default ON only when
# mlframework is the top-level project, so add_subdirectory() users stay quiet.
option(MLFW_BUILD_TESTS "Build the test suites" ${PROJECT_IS_TOP_LEVEL})
option(MLFW_BUILD_SAMPLES "Build the samples" ${PROJECT_IS_TOP_LEVEL})
option(MLFW_BUILD_BENCHMARKS "Build the benchmarks" ${PROJECT_IS_TOP_LEVEL})
option(MLFW_INSTALL "Generate the install target" ${PROJECT_IS_TOP_LEVEL})
option(MLFW_WARNINGS_AS_ERRORS "Treat compiler warnings as errors" OFF)
# Off by default: ccache (which development builds use) does not cache a compile that loads a
# precompiled header unless its sloppiness settings allow it. CI, which has no ccache, turns it on.
option(MLFW_PRECOMPILE_HEADERS "Precompile Boost.Test's header for the test executables" OFF)
# Off by default: a unity build recompiles a whole batch of test files when one of them changes,
# where development wants per-file rebuilds (and ccache hits). CI, which builds everything once,
# turns it on: each test file's headers are parsed and their templates instantiated once per
# batch instead of once per file.
option(MLFW_UNITY_TESTS "Build the test executables as unity builds (batches of test files)" OFF)
set(MLFW_UNITY_TESTS_BATCH_SIZE 8 CACHE STRING "Test files per unity batch with MLFW_UNITY_TESTS (0: one batch per executable)")
# Compile options the test executables add after the build type's (empty by default). CI's release
# step passes -O1: the test files then compile in 30% less CPU time than at -O3 (GCC 12, unity
# batches of test_optimizers 29.4 s against 21.2 s, test_distributed 28.5 against 19.5), while the
# library, samples and benchmarks keep the build type's optimization.
set(MLFW_TEST_COMPILE_OPTIONS "" CACHE STRING "Extra compile options for the test executables, e.g. -O1")
set(MLFW_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address,undefined")
# On by default: the x86 kernel sets (AVX2, AVX-512 and its BF16/FP16 extensions) are built beside
# the portable one and chosen at run time. Off builds the portable kernels alone, which every CPU
# runs: a library for code that never reaches the kernels' speed, such as the fuzz targets (whose
# build leaves out the kernel sets' 64 s of compile CPU time under the sanitizers).
option(MLFW_CPU_SIMD_KERNELS "Build the x86 SIMD kernel sets beside the portable kernels" ON)
# libFuzzer targets under fuzz/ (clang only; scripts/fuzz.sh builds them in their own build dir).
option(MLFW_BUILD_FUZZERS "Build the libFuzzer targets (needs clang)" OFF)

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()

# Project-wide compile settings live on this interface target, never in
# CMAKE_CXX_FLAGS, so consumers embedding us are not affected.
add_library(mlfw_build_flags INTERFACE)
target_compile_features(mlfw_build_flags INTERFACE cxx_std_20)
target_compile_options(mlfw_build_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
  $<$<AND:$<BOOL:${MLFW_WARNINGS_AS_ERRORS}>,$<COMPILE_LANGUAGE:CXX>>:-Werror>
  # `#pragma omp simd` is a request: clang reports a loop its vectorizer declines (at -O1, as the
  # sanitizer build compiles, the optimizer's element conversions) as -Wpass-failed, an error
  # under -Werror. GCC, which builds the shipped library, vectorizes them.
  $<$<AND:$<CXX_COMPILER_ID:Clang>,$<COMPILE_LANGUAGE:CXX>>:-Wno-pass-failed>)
if(MLFW_SANITIZE)
  target_compile_options(mlfw_build_flags INTERFACE -fsanitize=${MLFW_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(mlfw_build_flags INTERFACE -fsanitize=${MLFW_SANITIZE})
  message(STATUS "mlframework: sanitizers ${MLFW_SANITIZE}")
endif()
if(MLFW_BUILD_FUZZERS)
  # Coverage feedback for libFuzzer in everything we build (the library too);
  # only the fuzz executables link the fuzzer's main.
  target_compile_options(mlfw_build_flags INTERFACE -fsanitize=fuzzer-no-link)
endif()

find_package(xtl REQUIRED)
find_package(xsimd REQUIRED)
find_package(xtensor REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
message(STATUS "mlframework: xtensor ${xtensor_VERSION}, xsimd ${xsimd_VERSION}, OpenMP ${OpenMP_CXX_VERSION}")

# Optional engines, each detected in its own file (status lines say what was found):
# MlfwMpi.cmake sets MLFW_HAS_MPI, MlfwCuda.cmake sets MLFW_HAS_CUDA and MLFW_HAS_NCCL.
include(MlfwMpi OPTIONAL)
include(MlfwCuda OPTIONAL)
