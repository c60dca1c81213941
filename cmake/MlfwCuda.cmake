# CUDA backend and NCCL process group: detected, and switchable.
#
# Sets MLFW_HAS_CUDA and MLFW_HAS_NCCL (they reach code through config.hpp) and
# the interface target mlfw_cuda_flags (language standard and warnings for .cu files).
# MLFW_ENABLE_CUDA defaults ON when nvcc is found; MLFW_ENABLE_NCCL defaults ON.
include(CheckLanguage)
include(CheckSourceCompiles)

set(MLFW_HAS_CUDA OFF)
set(MLFW_HAS_NCCL OFF)

check_language(CUDA)
set(_mlfw_cuda_default OFF)
if(CMAKE_CUDA_COMPILER)
  set(_mlfw_cuda_default ON)
endif()
option(MLFW_ENABLE_CUDA "Build the CUDA backend (needs nvcc)" ${_mlfw_cuda_default})
option(MLFW_ENABLE_NCCL "Build the NCCL process group (needs the CUDA backend and NCCL)" ON)

if(NOT MLFW_ENABLE_CUDA)
  message(STATUS "mlframework: CUDA backend OFF (MLFW_ENABLE_CUDA=OFF)")
  return()
endif()
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "mlframework: CUDA backend OFF (no CUDA compiler found; put nvcc on PATH or set CMAKE_CUDA_COMPILER)")
  return()
endif()

# Ampere (sm_80) and Hopper (sm_90), unless the user chose.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures to build for")
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# The multi-tensor kernels take their tensor table as a kernel parameter of up to 32 KB, which
# CUDA allows since 12.1 (before: 4 KB), and StreamGuard checks the device of a framework's
# stream with cudaStreamGetDevice, which CUDA has since 12.8.
if(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.8)
  message(STATUS "mlframework: CUDA backend OFF (nvcc ${CMAKE_CUDA_COMPILER_VERSION} found; the backend needs CUDA 12.8 or newer)")
  return()
endif()

# The .cu files include the shared headers, which are C++20. CMake learned the
# CUDA20 flags for nvcc only recently, so probe nvcc (with this host compiler) directly.
add_library(mlfw_cuda_flags INTERFACE)
set(_mlfw_cuda_std_flag "")
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_REQUIRED_FLAGS "-std=c++20")
  set(CMAKE_REQUIRED_QUIET ON)
  check_source_compiles(CUDA [=[
#include <concepts>
template <std::integral T> __global__ void Probe(T* p) { p[threadIdx.x] = T{}; }
struct S { int a; friend bool operator==(const S&, const S&) = default; };
int main() { Probe<<<1, 1>>>(static_cast<int*>(nullptr)); return S{1} == S{1} ? 0 : 1; }
]=] MLFW_NVCC_SUPPORTS_CXX20)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_QUIET)
  if(NOT MLFW_NVCC_SUPPORTS_CXX20)
    message(STATUS "mlframework: CUDA backend OFF (nvcc ${CMAKE_CUDA_COMPILER_VERSION} cannot compile C++20 with host compiler ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION})")
    return()
  endif()
  set(_mlfw_cuda_std_flag "-std=c++20")
  target_compile_options(mlfw_cuda_flags INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
else()
  target_compile_features(mlfw_cuda_flags INTERFACE cuda_std_20)
endif()

# Same warnings for device code and for the host compiler behind nvcc.
target_compile_options(mlfw_cuda_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
  $<$<AND:$<BOOL:${MLFW_WARNINGS_AS_ERRORS}>,$<COMPILE_LANGUAGE:CUDA>>:-Werror=all-warnings -Xcompiler=-Werror>)
target_link_libraries(mlfw_build_flags INTERFACE mlfw_cuda_flags)
set(MLFW_HAS_CUDA ON)
message(STATUS "mlframework: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}, C++20)")

if(NOT MLFW_ENABLE_NCCL)
  message(STATUS "mlframework: NCCL process group OFF (MLFW_ENABLE_NCCL=OFF)")
  return()
endif()
find_package(NCCL QUIET)
if(NCCL_FOUND)
  set(MLFW_HAS_NCCL ON)
  message(STATUS "mlframework: NCCL process group ON (NCCL ${NCCL_VERSION}, ${NCCL_LIBRARY})")
else()
  message(STATUS "mlframework: NCCL process group OFF (nccl.h / libnccl not found; set NCCL_ROOT)")
endif()
