// The CPU backend's side of core's raw host-buffer conversion (core/HostConversion.hpp).
#include <mlframework/core/HostConversion.hpp>

#include <string>

#include <mlframework/core/Error.hpp>

#include "mlframework/backends/cpu/KernelTable.hpp"

namespace mlframework {

namespace {

void RequireValid(DataType dtype, const char* parameter) {
  if (!IsValid(dtype)) {
    throw ArgumentError(parameter, "unknown DataType " + std::to_string(static_cast<int>(dtype)));
  }
}

}  // namespace

void ConvertHostElements(const void* src, DataType src_dtype, void* dst, DataType dst_dtype, std::size_t count) {
  RequireValid(src_dtype, "src_dtype");
  RequireValid(dst_dtype, "dst_dtype");
  if (count == 0) return;
  if (src == nullptr) throw ArgumentNullError("src");
  if (dst == nullptr) throw ArgumentNullError("dst");
  // The cached set: callers convert blocks that stay in cache, and its ordinary stores need no
  // fence before another thread or MPI reads the output.
  using backends::cpu::Slot;
  static_cast<void>(
      backends::cpu::ActiveKernels().cached.cast[Slot(src_dtype)][Slot(dst_dtype)](src, dst, count, 1.0f));
}

}  // namespace mlframework
