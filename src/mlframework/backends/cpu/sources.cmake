# The FP8 kernels (Float8Kernels.hpp): the driver and the portable loops everywhere, one file of
# vector loops per x86 instruction set with the flags of its KernelsX file.
target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/CpuBackendFloat8.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Float8Kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Float8KernelsPortable.cpp)

# One source file per instruction set, each with its own flags (the rest of the
# library keeps the baseline flags); KernelDispatch.cpp picks one at run time.
if(MLFW_CPU_SIMD_KERNELS AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$"
   AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_sources(mlframework PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/KernelsAvx2.cpp
    ${CMAKE_CURRENT_LIST_DIR}/KernelsAvx512.cpp
    ${CMAKE_CURRENT_LIST_DIR}/KernelsAvx512Bf16.cpp
    ${CMAKE_CURRENT_LIST_DIR}/KernelsAvx512Fp16.cpp)
  target_sources(mlframework PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/Float8KernelsAvx2.cpp
    ${CMAKE_CURRENT_LIST_DIR}/Float8KernelsAvx512.cpp)
  # GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized on their own
  # self-initialised `__Y = __Y` variables (GCC bug 105593, fixed in 13): silence it for these files only.
  set(mlfw_avx512_flags
    "-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-mfma;-mf16c;$<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/KernelsAvx2.cpp
    PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/KernelsAvx512.cpp
    PROPERTIES COMPILE_OPTIONS "${mlfw_avx512_flags}")
  # The FP8 loops without FMA contraction: the decoding sum adds each part's product, rounded,
  # as the portable loop does (a fused multiply-add would round once, other bits).
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/Float8KernelsAvx2.cpp
    PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-ffp-contract=off")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/Float8KernelsAvx512.cpp
    PROPERTIES COMPILE_OPTIONS "${mlfw_avx512_flags};-ffp-contract=off")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/KernelsAvx512Bf16.cpp
    PROPERTIES COMPILE_OPTIONS "${mlfw_avx512_flags};-mavx512bf16")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/KernelsAvx512Fp16.cpp
    PROPERTIES COMPILE_OPTIONS "${mlfw_avx512_flags};-mavx512bf16;-mavx512fp16")
  # The two drivers that pick a kernel set at run time.
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/KernelDispatch.cpp ${CMAKE_CURRENT_LIST_DIR}/Float8Kernels.cpp
    PROPERTIES COMPILE_DEFINITIONS MLFW_CPU_X86_KERNELS)
  message(STATUS "mlframework: CPU kernels portable + avx2 + avx512 + avx512_bf16 + avx512_fp16 (chosen at run time)")
else()
  message(STATUS "mlframework: CPU kernels portable only (${CMAKE_SYSTEM_PROCESSOR}, MLFW_CPU_SIMD_KERNELS=${MLFW_CPU_SIMD_KERNELS})")
endif()

# The fused optimizer steps (OptimizerKernels.hpp): one element-kernel file per instruction set,
# all without FMA contraction (the only FMAs are the explicit ones where PyTorch's kernels fuse)
# and without errno-bound math (the square root stays one instruction, so the loops vectorise).
set(mlfw_optimizer_numerics "-ffp-contract=off;-fno-math-errno")
target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/OptimizerKernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/OptimizerKernelsPortable.cpp)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/OptimizerKernelsPortable.cpp
  PROPERTIES COMPILE_OPTIONS "${mlfw_optimizer_numerics}")
if(MLFW_CPU_SIMD_KERNELS AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$"
   AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_sources(mlframework PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/OptimizerKernelsAvx2.cpp
    ${CMAKE_CURRENT_LIST_DIR}/OptimizerKernelsAvx512.cpp)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/OptimizerKernelsAvx2.cpp
    PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;${mlfw_optimizer_numerics}")
  # xsimd's AVX-512 sqrt is the masked intrinsic over an "undefined" register, which GCC 12 reports
  # as -Wuninitialized under the sanitizer build's flags.
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/OptimizerKernelsAvx512.cpp
    PROPERTIES COMPILE_OPTIONS
    "${mlfw_avx512_flags};${mlfw_optimizer_numerics};$<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized>")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/OptimizerKernels.cpp
    PROPERTIES COMPILE_DEFINITIONS MLFW_CPU_X86_KERNELS)
endif()
