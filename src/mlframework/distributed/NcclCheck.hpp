#pragma once
// Private: every NCCL call goes through MLFW_NCCL_CHECK, so a failure becomes a
// CommunicationError naming the call, NCCL's error string, its last error
// message and the file and line of the call.

#include <cstdio>
#include <string>

#include <nccl.h>

#include <mlframework/core/Error.hpp>

namespace mlframework::distributed::detail {

[[noreturn]] inline void ThrowNcclError(const char* call, ncclResult_t result, const char* file, int line) {
  std::string message = std::string(call) + " failed: " + ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') {
    message += " (" + std::string(last) + ")";
  }
  throw CommunicationError(message + " at " + file + ":" + std::to_string(line));
}

}  // namespace mlframework::distributed::detail

/// Runs an NCCL call; throws CommunicationError naming it when it does not return ncclSuccess.
#define MLFW_NCCL_CHECK(call)                                                                          \
  do {                                                                                                 \
    const ncclResult_t mlfw_nccl_result = (call);                                                      \
    if (mlfw_nccl_result != ncclSuccess) {                                                             \
      ::mlframework::distributed::detail::ThrowNcclError(#call, mlfw_nccl_result, __FILE__, __LINE__); \
    }                                                                                                  \
  } while (false)

/// For destructors and abort paths, which must not throw: runs the NCCL call and reports a
/// failure on stderr (call, NCCL's error string, file and line).
#define MLFW_NCCL_CHECK_NOTHROW(call)                                                                            \
  do {                                                                                                           \
    const ncclResult_t mlfw_nccl_result = (call);                                                                \
    if (mlfw_nccl_result != ncclSuccess) {                                                                       \
      std::fprintf(stderr, "mlframework: %s failed: %s at %s:%d\n", #call, ncclGetErrorString(mlfw_nccl_result), \
                   __FILE__, __LINE__);                                                                          \
    }                                                                                                            \
  } while (false)
