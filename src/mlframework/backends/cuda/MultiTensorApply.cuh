#pragma once
// Private, device code: the block-level machinery shared by the multi-tensor kernels.

#include <cstdint>

#include <cuda_runtime.h>

#include <mlframework/core/DeviceScaling.hpp>

#include "mlframework/backends/cuda/ElementOps.hpp"
#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

/// The multiplier of this launch (read once per thread; uniform across the grid).
__device__ inline float ResolveFactor(const FactorSource& factor) {
  switch (factor.mode) {
    case FactorMode::Scale:
      return *factor.scale;
    case FactorMode::InverseOfScale:
      return InverseScale(*factor.scale);
    case FactorMode::Value:
      break;
  }
  return factor.value;
}

/// Calls fn(DtypeTag<D>{}) for the runtime dtype: the one dtype branch per piece (uniform in a block).
template <typename Fn>
__device__ inline void DispatchDtype(std::uint8_t dtype, Fn&& fn) {
  switch (static_cast<DataType>(dtype)) {
    case DataType::Float16:
      fn(DtypeTag<DataType::Float16>{});
      return;
    case DataType::BFloat16:
      fn(DtypeTag<DataType::BFloat16>{});
      return;
    case DataType::Float32:
      break;
  }
  fn(DtypeTag<DataType::Float32>{});
}

/// Calls fn(s, lo, hi) for each piece of this block's chunk: elements [lo, hi) of tensor s, in order.
template <typename Fn>
__device__ inline void ForEachPiece(const TensorListMeta& list, Fn&& fn) {
  ForEachPieceOfBlock(list, blockIdx.x, static_cast<Fn&&>(fn));
}

/// Sets *flag when any thread of the block saw a non-finite value (all threads must call it).
__device__ inline void BlockRaiseFlag(bool found, std::int32_t* flag) {
  const int any = __syncthreads_or(found ? 1 : 0);
  if (any != 0 && threadIdx.x == 0 && flag != nullptr) {
    *flag = 1;
  }
}

/// Deterministic block sum of one float per thread (fixed shuffle tree, warps in order); valid in thread 0.
__device__ inline float BlockSum(float value) {
  __shared__ float warp_sums[kBlockThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_sums[warp] = value;
  }
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kBlockThreads / 32; ++w) {
      total += warp_sums[w];
    }
  }
  return total;
}

}  // namespace mlframework::backends::cuda
