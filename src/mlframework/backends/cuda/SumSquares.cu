#include "mlframework/backends/cuda/SumSquares.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/MultiTensorApply.cuh"

namespace mlframework::backends::cuda {

namespace {

__global__ void __launch_bounds__(kBlockThreads)
    SumSquaresKernel(const __grid_constant__ LaunchTable table, float* partials, std::int32_t* flag) {
  const TableView list = table.View();
  float sum = 0.0f;
  bool found = false;
  ForEachPiece(list, [&](int s, std::uint64_t lo, std::uint64_t hi) {
    DispatchDtype(list.dtype[0][s], [&](auto tag) {
      constexpr DataType D = decltype(tag)::value;
      const auto* data = static_cast<const StoredType<D>*>(list.data[0][s]);
      // Per-element loads (ForEachElement), not ForEachStored's vectors: on an H100 the FP32
      // sum of squares of one 2^26 tensor runs at 0.84 of a copy with eight 4-byte loads in
      // flight a thread, and at 0.73-0.75 with one 16-byte vector.
      ForEachElement(
          lo, hi, [&](std::uint64_t i) { return data[i]; },
          [&](std::uint64_t, StoredType<D> stored) {
            const float v = ToFloat<D>(stored);
            sum += v * v;
            found |= !IsFiniteStored<D>(stored);
          });
    });
  });
  const float block_sum = BlockSum(sum);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = block_sum;
  }
  BlockRaiseFlag(found, flag);
}

__global__ void __launch_bounds__(kFinalizeThreads)
    SumSquaresFinalizeKernel(const float* partials, std::uint64_t count, double factor, DeviceResult* result) {
  __shared__ double sums[kFinalizeThreads];
  double sum = 0.0;
  for (std::uint64_t i = threadIdx.x; i < count; i += kFinalizeThreads) {
    sum += static_cast<double>(partials[i]);
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kFinalizeThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) {
      sums[threadIdx.x] += sums[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    result->sum = sums[0] * factor * factor;
  }
}

}  // namespace

void LaunchSumSquares(const Launch& launch, float* partials, std::int32_t* flag, cudaStream_t stream) {
  SumSquaresKernel<<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, partials, flag);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchSumSquaresFinalize(const float* partials, std::size_t count, double factor, DeviceResult* result,
                              cudaStream_t stream) {
  SumSquaresFinalizeKernel<<<1, kFinalizeThreads, 0, stream>>>(partials, count, factor, result);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
