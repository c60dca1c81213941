#pragma once
// Private: the per-tensor non-finite scan behind an overflow report (TensorBackend::ScanNonFinite).

#include <cstdint>

#include <cuda_runtime_api.h>

#include <mlframework/core/DataType.hpp>

namespace mlframework::backends::cuda {

/// What the scan kernel accumulates in device memory for one tensor. Before the launch: all
/// zero except first_index, all ones (no index yet).
struct DeviceNonFiniteScan {
  unsigned long long count;          // NOLINT(google-runtime-int): atomicAdd's type
  unsigned long long first_index;    // NOLINT(google-runtime-int): atomicMin's type
  unsigned long long nan_count;      // NOLINT(google-runtime-int): atomicAdd's type
  unsigned long long pos_inf_count;  // NOLINT(google-runtime-int)
  unsigned long long neg_inf_count;  // NOLINT(google-runtime-int)
};

/// True when the kernel handles @p dtype (FP32, FP16, BF16).
bool ScanKernelHandles(DataType dtype) noexcept;

/// Queues the scan of the @p size elements of @p dtype at @p data into @p out (device memory,
/// prepared as DeviceNonFiniteScan says). The host does not wait.
void LaunchScanNonFinite(const void* data, DataType dtype, std::uint64_t size, DeviceNonFiniteScan* out,
                         cudaStream_t stream);

}  // namespace mlframework::backends::cuda
