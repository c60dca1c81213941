#pragma once
// Private, device code: the block-level machinery shared by the multi-tensor kernels.

#include <cstdint>
#include <type_traits>

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
    case DataType::Float8E4M3FN:
      fn(DtypeTag<DataType::Float8E4M3FN>{});
      return;
    case DataType::Float8E5M2:
      fn(DtypeTag<DataType::Float8E5M2>{});
      return;
    case DataType::Float32:
      break;
  }
  fn(DtypeTag<DataType::Float32>{});
}

/// Calls fn(s, lo, hi) for each piece of this block's chunk: elements [lo, hi) of tensor s, in order.
template <typename Fn>
__device__ inline void ForEachPiece(const TableView& list, Fn&& fn) {
  ForEachPieceOfBlock(list, blockIdx.x, static_cast<Fn&&>(fn));
}

/// ForEachPiece() over a list of pairs: calls fn(src_tag, dst_tag, src, dst, lo, hi) for each piece,
/// with the source (slot 0, read only) and the destination (slot 1) typed by their runtime dtypes:
/// DtypeTag<S>, DtypeTag<T>, const StoredType<S>*, StoredType<T>*.
template <typename Fn>
__device__ inline void ForEachPair(const TableView& list, Fn&& fn) {
  ForEachPiece(list, [&](int s, std::uint64_t lo, std::uint64_t hi) {
    DispatchDtype(list.dtype[0][s], [&](auto src_tag) {
      DispatchDtype(list.dtype[1][s], [&](auto dst_tag) {
        const auto* src = static_cast<const StoredType<decltype(src_tag)::value>*>(list.data[0][s]);
        auto* dst = static_cast<StoredType<decltype(dst_tag)::value>*>(list.data[1][s]);
        fn(src_tag, dst_tag, src, dst, lo, hi);
      });
    });
  });
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

/// 16-byte loads a thread issues before it uses the first (ForEachStored()). One, with four
/// 512-thread blocks on each multiprocessor (kMinBlocksPerMultiprocessor), keeps 32 KB in flight
/// per multiprocessor. Measured on an H100: four vectors a thread took 82 registers, so one
/// block a multiprocessor, and ran slower than per-element loads; two with two blocks ran at
/// 0.71 of a copy (FP16 unscale) where one with four runs at 0.90.
inline constexpr int kVectorsInFlight = 1;

/// Calls fn(x) for each stored element x of data[lo, hi), and with kWrite stores its result
/// back (fn returns the new value; without kWrite fn returns nothing and data may be const).
/// The body of the range moves in aligned 16-byte vectors, kVectorsInFlight of a thread in
/// flight: one load instruction per 8 FP16/BF16 or 4 FP32 elements, where per-element loads of
/// 2 bytes left FP16 kernels at 0.7-0.8 of a copy's bandwidth on an H100. The few elements
/// before the first 16-byte boundary and after the last one go one per thread.
template <bool kWrite, typename T, typename Fn>
__device__ inline void ForEachStored(T* data, std::uint64_t lo, std::uint64_t hi, Fn&& fn) {
  using Element = std::remove_const_t<T>;
  using Vector = std::conditional_t<std::is_const_v<T>, const uint4, uint4>;
  constexpr std::uint64_t kPerVector = sizeof(uint4) / sizeof(Element);
  union Lanes {
    uint4 vector;
    Element elements[kPerVector];
  };
  auto visit = [&](std::uint64_t i) {
    if constexpr (kWrite) {
      data[i] = fn(data[i]);
    } else {
      fn(data[i]);
    }
  };
  // Tensors start 16-byte aligned, but a piece may start anywhere in its tensor.
  const std::uint64_t misaligned = (reinterpret_cast<std::uintptr_t>(data + lo) / sizeof(Element)) % kPerVector;
  std::uint64_t body_lo = lo + (misaligned == 0 ? 0 : kPerVector - misaligned);
  body_lo = body_lo < hi ? body_lo : hi;
  const std::uint64_t vectors = (hi - body_lo) / kPerVector;
  const std::uint64_t body_hi = body_lo + vectors * kPerVector;
  if (threadIdx.x < body_lo - lo) {
    visit(lo + threadIdx.x);
  }
  if (threadIdx.x < hi - body_hi) {
    visit(body_hi + threadIdx.x);
  }
  Vector* body = reinterpret_cast<Vector*>(data + body_lo);
  constexpr std::uint64_t kStride = kBlockThreads;
  for (std::uint64_t base = threadIdx.x; base < vectors; base += kStride * kVectorsInFlight) {
    Lanes lanes[kVectorsInFlight];
#pragma unroll
    for (int k = 0; k < kVectorsInFlight; ++k) {
      const std::uint64_t v = base + kStride * k;
      if (v < vectors) {
        lanes[k].vector = body[v];
      }
    }
#pragma unroll
    for (int k = 0; k < kVectorsInFlight; ++k) {
      const std::uint64_t v = base + kStride * k;
      if (v < vectors) {
#pragma unroll
        for (std::uint64_t e = 0; e < kPerVector; ++e) {
          if constexpr (kWrite) {
            lanes[k].elements[e] = fn(lanes[k].elements[e]);
          } else {
            fn(lanes[k].elements[e]);
          }
        }
        if constexpr (kWrite) {
          body[v] = lanes[k].vector;
        }
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

/// Raises *amax to the block's largest @p peak (non-negative, never NaN: such floats order as
/// their bits do, so one integer atomicMax per block does it).
__device__ inline void BlockRaiseAmax(float peak, float* amax) {
  __shared__ float warp_peaks[kBlockThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    peak = fmaxf(peak, __shfl_down_sync(0xffffffffu, peak, offset));
  }
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_peaks[warp] = peak;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float block = 0.0f;
    for (int w = 0; w < kBlockThreads / 32; ++w) {
      block = fmaxf(block, warp_peaks[w]);
    }
    if (block > 0.0f) {
      atomicMax(reinterpret_cast<int*>(amax), __float_as_int(block));
    }
  }
}

/// @p peak raised to |v| when v is finite (the amax leaves Inf and NaN out).
__device__ inline void RaisePeak(float& peak, float v) {
  const float a = fabsf(v);
  if (a <= 3.40282347e38f && a > peak) {
    peak = a;
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
