#include "mlframework/backends/cuda/Float8Cast.cuh"

#include <cuda_fp8.h>

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/MultiTensorApply.cuh"

namespace mlframework::backends::cuda {

namespace {

// The magnitude bits of a float: non-negative floats order as their bits do, and every NaN's
// exceed infinity's, so an integer maximum is an amax in which NaN wins.
__device__ inline std::uint32_t MagnitudeBits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// Raises *target to the block's largest @p peak. Every thread of the block calls it for the
// same piece (pieces are uniform across a block), once per piece: the second barrier lets the
// next piece reuse the shared slots.
__device__ inline void BlockRaiseMaxBits(std::uint32_t peak, std::uint32_t* target) {
  __shared__ std::uint32_t warp_peaks[kBlockThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    const std::uint32_t other = __shfl_down_sync(0xffffffffu, peak, offset);
    peak = other > peak ? other : peak;
  }
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_peaks[warp] = peak;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    std::uint32_t block = 0;
    for (int w = 0; w < kBlockThreads / 32; ++w) {
      block = warp_peaks[w] > block ? warp_peaks[w] : block;
    }
    if (block != 0) {
      atomicMax(target, block);
    }
  }
  __syncthreads();
}

// The sign bit of the NaN that the CPU backend's `x * factor` gives (x86 SSE/AVX rules, which
// torch's CPU cast follows): a NaN source comes out with its own sign, then a NaN factor with its
// sign, and an invalid product (infinity times zero) is the negative default NaN. The GPU writes
// every NaN it computes as the positive canonical NaN (its multiply and its FP16 widening alike),
// so the sign is taken from the stored source bits and the factor instead.
template <DataType S>
__device__ inline std::uint32_t CpuNaNSign(StoredType<S> stored, float factor) {
  if (IsNaNStored<S>(stored)) {
    return SignBitStored<S>(stored) ? 0x80000000u : 0u;
  }
  if (isnan(factor)) {
    return __float_as_uint(factor) & 0x80000000u;
  }
  return 0x80000000u;
}

// cuda_fp8.h's saturating conversion of @p x (@p stored widened) times @p factor; a NaN product
// keeps the sign that core/Float8Bits.hpp (and so the CPU backend) writes: the hardware conversion
// writes every NaN positive.
template <DataType S, DataType T>
__device__ inline std::uint8_t SaturateToFloat8(StoredType<S> stored, float x, float factor) {
  constexpr __nv_fp8_interpretation_t kFormat = T == DataType::Float8E4M3FN ? __NV_E4M3 : __NV_E5M2;
  const float y = x * factor;
  if (isnan(y)) {
    return static_cast<std::uint8_t>((CpuNaNSign<S>(stored, factor) >> 24) | 0x7fu);
  }
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(y, __NV_SATFINITE, kFormat));
}

__global__ void __launch_bounds__(kBlockThreads, kMinBlocksPerMultiprocessor)
    Float8AmaxKernel(const __grid_constant__ LaunchTable table, std::uint32_t index_base, float* amax) {
  const TableView list = table.View();
  auto* const amax_bits = reinterpret_cast<std::uint32_t*>(amax);
  ForEachPiece(list, [&](int s, std::uint64_t lo, std::uint64_t hi) {
    std::uint32_t peak = 0;
    DispatchDtype(list.dtype[0][s], [&](auto tag) {
      constexpr DataType D = decltype(tag)::value;
      const auto* data = static_cast<const StoredType<D>*>(list.data[0][s]);
      ForEachStored<false>(data, lo, hi, [&](StoredType<D> x) {
        const std::uint32_t m = MagnitudeBits(ToFloat<D>(x));
        peak = m > peak ? m : peak;
      });
    });
    BlockRaiseMaxBits(peak, amax_bits + index_base + s);
  });
}

__global__ void __launch_bounds__(kBlockThreads)
    ScaledCastKernel(const __grid_constant__ LaunchTable table, std::uint32_t index_base, const float* scale,
                     float* amax) {
  const TableView list = table.View();
  auto* const amax_bits = reinterpret_cast<std::uint32_t*>(amax);
  ForEachPiece(list, [&](int s, std::uint64_t lo, std::uint64_t hi) {
    const float factor = scale[index_base + s];
    std::uint32_t peak = 0;
    DispatchDtype(list.dtype[0][s], [&](auto src_tag) {
      constexpr DataType S = decltype(src_tag)::value;
      const auto* src = static_cast<const StoredType<S>*>(list.data[0][s]);
      auto* dst = static_cast<std::uint8_t*>(list.data[1][s]);
      const auto run = [&](auto dst_tag) {
        constexpr DataType T = decltype(dst_tag)::value;
        ForEachElement(
            lo, hi, [&](std::uint64_t i) { return src[i]; },
            [&](std::uint64_t i, StoredType<S> stored) {
              const float x = ToFloat<S>(stored);
              const std::uint32_t m = MagnitudeBits(x);
              peak = m > peak ? m : peak;
              dst[i] = SaturateToFloat8<S, T>(stored, x, factor);
            });
      };
      if (static_cast<DataType>(list.dtype[1][s]) == DataType::Float8E4M3FN) {
        run(DtypeTag<DataType::Float8E4M3FN>{});
      } else {
        run(DtypeTag<DataType::Float8E5M2>{});
      }
    });
    if (amax != nullptr) {
      BlockRaiseMaxBits(peak, amax_bits + index_base + s);
    }
  });
}

__global__ void __launch_bounds__(kBlockThreads)
    DequantizeKernel(const __grid_constant__ LaunchTable table, std::uint32_t index_base, const float* scale_inv) {
  const TableView list = table.View();
  ForEachPiece(list, [&](int s, std::uint64_t lo, std::uint64_t hi) {
    const float factor = scale_inv[index_base + s];
    const auto* src = static_cast<const std::uint8_t*>(list.data[0][s]);
    const auto run = [&](auto src_tag) {
      constexpr DataType S = decltype(src_tag)::value;
      DispatchDtype(list.dtype[1][s], [&](auto dst_tag) {
        constexpr DataType T = decltype(dst_tag)::value;
        auto* dst = static_cast<StoredType<T>*>(list.data[1][s]);
        ForEachElement(
            lo, hi, [&](std::uint64_t i) { return src[i]; },
            [&](std::uint64_t i, std::uint8_t x) { dst[i] = FromFloat<T>(ToFloat<S>(x) * factor); });
      });
    };
    if (static_cast<DataType>(list.dtype[0][s]) == DataType::Float8E4M3FN) {
      run(DtypeTag<DataType::Float8E4M3FN>{});
    } else {
      run(DtypeTag<DataType::Float8E5M2>{});
    }
  });
}

}  // namespace

void LaunchFloat8Amax(const Launch& launch, std::uint32_t index_base, float* amax, cudaStream_t stream) {
  Float8AmaxKernel<<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, index_base, amax);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchScaledCastToFloat8(const Launch& launch, std::uint32_t index_base, const float* scale, float* amax,
                              cudaStream_t stream) {
  ScaledCastKernel<<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, index_base, scale, amax);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchDequantizeFloat8(const Launch& launch, std::uint32_t index_base, const float* scale_inv,
                            cudaStream_t stream) {
  DequantizeKernel<<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, index_base, scale_inv);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
