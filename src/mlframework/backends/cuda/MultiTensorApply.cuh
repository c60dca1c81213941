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

/// Elements a thread loads before it uses the first: independent loads in flight hide the
/// memory latency, which a loop that loads, uses and stores one element at a time does not.
inline constexpr int kElementsInFlight = 8;

/// Calls apply(i, load(i)) for each index i in [lo, hi) of this thread (strided by the block),
/// issuing kElementsInFlight loads before the first apply: every load of a round is in flight
/// before any store of it, so an in-place kernel reads each element before writing it.
template <typename Load, typename Apply>
__device__ inline void ForEachElement(std::uint64_t lo, std::uint64_t hi, Load&& load, Apply&& apply) {
  using Value = decltype(load(lo));
  constexpr std::uint64_t kStride = kBlockThreads;
  for (std::uint64_t base = lo + threadIdx.x; base < hi; base += kStride * kElementsInFlight) {
    Value values[kElementsInFlight] = {};
#pragma unroll
    for (int k = 0; k < kElementsInFlight; ++k) {
      const std::uint64_t i = base + kStride * k;
      if (i < hi) {
        values[k] = load(i);
      }
    }
#pragma unroll
    for (int k = 0; k < kElementsInFlight; ++k) {
      const std::uint64_t i = base + kStride * k;
      if (i < hi) {
        apply(i, values[k]);
      }
    }
  }
}

/// Two loaded elements (AddInto reads its source and its destination).
template <typename A, typename B>
struct LoadedPair {
  A first;
  B second;
};

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
