#include "mlframework/backends/cuda/ScanNonFinite.cuh"

#include <algorithm>

#include "mlframework/backends/cuda/CudaCheck.hpp"

namespace mlframework::backends::cuda {

namespace {

constexpr int kScanThreads = 256;
constexpr std::uint64_t kMaxScanBlocks = 4096;

// Exponent, mantissa and sign masks of a format stored in Bits (the same tests as the host scan).
template <typename Bits>
struct Masks {
  Bits exponent;
  Bits mantissa;
  Bits sign;
};

// Grid-stride loop; per-thread results are folded into *out with one set of atomics per thread
// that saw a non-finite value (the scan runs on overflow steps only, where they are few).
template <typename Bits>
__global__ void ScanKernel(const Bits* data, std::uint64_t size, Masks<Bits> masks, DeviceNonFiniteScan* out) {
  unsigned long long count = 0;      // NOLINT(google-runtime-int)
  unsigned long long first = ~0ull;  // NOLINT(google-runtime-int)
  unsigned long long nan = 0;        // NOLINT(google-runtime-int)
  unsigned long long pos = 0;        // NOLINT(google-runtime-int)
  unsigned long long neg = 0;        // NOLINT(google-runtime-int)
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < size; i += stride) {
    const Bits value = data[i];
    if ((value & masks.exponent) != masks.exponent) {
      continue;
    }
    ++count;
    first = i < first ? i : first;
    if ((value & masks.mantissa) != 0) {
      ++nan;
    } else if ((value & masks.sign) != 0) {
      ++neg;
    } else {
      ++pos;
    }
  }
  if (count != 0) {
    atomicAdd(&out->count, count);
    atomicMin(&out->first_index, first);
    if (nan != 0) atomicAdd(&out->nan_count, nan);
    if (pos != 0) atomicAdd(&out->pos_inf_count, pos);
    if (neg != 0) atomicAdd(&out->neg_inf_count, neg);
  }
}

template <typename Bits>
void Launch(const void* data, std::uint64_t size, Masks<Bits> masks, DeviceNonFiniteScan* out, cudaStream_t stream) {
  const std::uint64_t blocks = std::min<std::uint64_t>(kMaxScanBlocks, (size + kScanThreads - 1) / kScanThreads);
  ScanKernel<Bits><<<static_cast<unsigned int>(blocks), kScanThreads, 0, stream>>>(static_cast<const Bits*>(data), size,
                                                                                   masks, out);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool ScanKernelHandles(DataType dtype) noexcept {
  return dtype == DataType::Float32 || dtype == DataType::Float16 || dtype == DataType::BFloat16;
}

void LaunchScanNonFinite(const void* data, DataType dtype, std::uint64_t size, DeviceNonFiniteScan* out,
                         cudaStream_t stream) {
  if (size == 0) {
    return;
  }
  switch (dtype) {
    case DataType::Float32:
      Launch<std::uint32_t>(data, size, {0x7f800000u, 0x007fffffu, 0x80000000u}, out, stream);
      break;
    case DataType::Float16:
      Launch<std::uint16_t>(data, size, {0x7c00u, 0x03ffu, 0x8000u}, out, stream);
      break;
    case DataType::BFloat16:
      Launch<std::uint16_t>(data, size, {0x7f80u, 0x007fu, 0x8000u}, out, stream);
      break;
    default:
      break;  // ScanKernelHandles() is false: the caller scans on the host
  }
}

}  // namespace mlframework::backends::cuda
