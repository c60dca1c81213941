#pragma once
// Private: every CUDA runtime call goes through MLFW_CUDA_CHECK, so a failure
// becomes a BackendError naming the call, the runtime's error name and string,
// and the file and line of the call.

#include <string>

#include <cuda_runtime_api.h>

#include <mlframework/core/Error.hpp>

namespace mlframework::backends::cuda {

/// "cudaMalloc(&p, n) failed: cudaErrorMemoryAllocation (out of memory) at file:line".
inline std::string CudaErrorMessage(const char* call, cudaError_t status, const char* file, int line) {
  return std::string(call) + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ") at " +
         file + ":" + std::to_string(line);
}

[[noreturn]] inline void ThrowCudaError(const char* call, cudaError_t status, const char* file, int line) {
  // Clear a sticky-free error so the next call does not report it again.
  static_cast<void>(cudaGetLastError());
  throw BackendError(CudaErrorMessage(call, status, file, line));
}

}  // namespace mlframework::backends::cuda

/// Runs a CUDA runtime call; throws BackendError naming it when it does not return cudaSuccess.
#define MLFW_CUDA_CHECK(call)                                                                     \
  do {                                                                                            \
    const cudaError_t mlfw_cuda_status = (call);                                                  \
    if (mlfw_cuda_status != cudaSuccess) {                                                        \
      ::mlframework::backends::cuda::ThrowCudaError(#call, mlfw_cuda_status, __FILE__, __LINE__); \
    }                                                                                             \
  } while (false)

/// For destructors, which must not throw: runs the call and ignores a failure (the
/// only expected one is the runtime already shutting down at process exit).
#define MLFW_CUDA_CHECK_NOTHROW(call)            \
  do {                                           \
    const cudaError_t mlfw_cuda_status = (call); \
    if (mlfw_cuda_status != cudaSuccess) {       \
      static_cast<void>(cudaGetLastError());     \
    }                                            \
  } while (false)
