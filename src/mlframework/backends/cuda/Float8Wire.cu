// The FP8 block wire's kernels. The encoder gives each wire block to one warp (a lane loads 8
// values, a warp maximum of the magnitude bits, the scale exponent, the codes); the decoding sum
// gives each thread 8 outputs and sums the parts in rank order. Each thread issues all its loads
// before it needs one: one value per thread kept too few bytes in flight to fill the memory
// system. The math is core/Float8BlockMath.hpp's, which the CPU codec's element kernels share:
// single IEEE multiplies by powers of two (exact) and integer rounding, and the sum's additions
// are __fadd_rn so that nvcc cannot contract a product into them.
#include "mlframework/backends/cuda/Float8Wire.cuh"

#include <algorithm>

#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/core/Float8BlockMath.hpp"

namespace mlframework::backends::cuda {

namespace {

constexpr int kWireBlock = static_cast<int>(Float8BlockRuns::kBlockValues);
constexpr int kValuesPerLane = kWireBlock / 32;
static_assert(kWireBlock % 32 == 0, "a warp per wire block");

// Grid sizes: enough blocks to fill any GPU many times over; the kernels stride past them.
constexpr std::size_t kMaxGrid = std::size_t{1} << 20;
constexpr int kEncodeThreads = 256;
constexpr int kEncodeWarps = kEncodeThreads / 32;
constexpr int kSumThreads = 256;
constexpr int kSumPerThread = 8;
constexpr std::size_t kSumChunk = static_cast<std::size_t>(kSumThreads) * kSumPerThread;

__global__ void __launch_bounds__(kEncodeThreads)
    Float8WireEncodeKernel(const float* values, std::size_t runs, std::size_t length, std::size_t stride,
                           std::uint8_t* codes, float* scale_inv) {
  const std::size_t per_run = (length + kWireBlock - 1) / kWireBlock;
  const std::size_t total = runs * per_run;
  const unsigned lane = threadIdx.x % 32u;
  const std::size_t warps = static_cast<std::size_t>(gridDim.x) * kEncodeWarps;
  // b is the same for the whole warp, so every lane takes part in the warp maximum.
  for (std::size_t b = (static_cast<std::size_t>(blockIdx.x) * kEncodeWarps) + (threadIdx.x / 32u); b < total;
       b += warps) {
    const std::size_t run = b / per_run;
    const std::size_t first = (b % per_run) * kWireBlock;
    const std::size_t inside = min(length - first, static_cast<std::size_t>(kWireBlock));
    const float* in = values + (run * stride) + first;
    float x[kValuesPerLane];
#pragma unroll
    for (int j = 0; j < kValuesPerLane; ++j) {
      const std::size_t k = lane + (32u * j);
      x[j] = k < inside ? in[k] : 0.0f;
    }
    // Magnitude bits order as the magnitudes do, NaN and infinity above every number.
    std::uint32_t magnitude = 0;
#pragma unroll
    for (int j = 0; j < kValuesPerLane; ++j) {
      magnitude = max(magnitude, detail::FloatAsBits(x[j]) & 0x7fffffffu);
    }
    const std::uint32_t amax = __reduce_max_sync(0xffffffffu, magnitude);
    const bool finite = !detail::Float8BlockIsNonFinite(amax);
    const int exponent = finite ? detail::Float8BlockScaleExponent(amax) : 0;
    const float scale = detail::Float8BlockPowerOfTwo(exponent);
    std::uint8_t* out = codes + (run * length) + first;
#pragma unroll
    for (int j = 0; j < kValuesPerLane; ++j) {
      const std::size_t k = lane + (32u * j);
      if (k < inside) {
        out[k] = finite ? detail::EncodeFloat8BlockElement(x[j], scale) : std::uint8_t{0};
      }
    }
    if (lane == 0) {
      scale_inv[b] = finite ? detail::Float8BlockPowerOfTwo(-exponent) : detail::Float8BlockNaNScale();
    }
  }
}

__global__ void __launch_bounds__(kSumThreads)
    Float8WireDecodeSumKernel(const std::uint8_t* codes, const float* scale_inv, std::size_t parts, std::size_t length,
                              float* out) {
  const std::size_t blocks = (length + kWireBlock - 1) / kWireBlock;
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * kSumChunk;
  for (std::size_t base = static_cast<std::size_t>(blockIdx.x) * kSumChunk; base < length; base += step) {
    float sum[kSumPerThread];
#pragma unroll
    for (int j = 0; j < kSumPerThread; ++j) {
      const std::size_t i = base + threadIdx.x + (static_cast<std::size_t>(j) * kSumThreads);
      sum[j] = i < length ? detail::DecodeFloat8BlockElement(codes[i], scale_inv[i / kWireBlock]) : 0.0f;
    }
    for (std::size_t p = 1; p < parts; ++p) {
      const std::uint8_t* part = codes + (p * length);
      const float* part_scales = scale_inv + (p * blocks);
#pragma unroll
      for (int j = 0; j < kSumPerThread; ++j) {
        const std::size_t i = base + threadIdx.x + (static_cast<std::size_t>(j) * kSumThreads);
        if (i < length) {
          sum[j] = __fadd_rn(sum[j], detail::DecodeFloat8BlockElement(part[i], part_scales[i / kWireBlock]));
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kSumPerThread; ++j) {
      const std::size_t i = base + threadIdx.x + (static_cast<std::size_t>(j) * kSumThreads);
      if (i < length) {
        out[i] = sum[j];
      }
    }
  }
}

unsigned GridOf(std::size_t work) { return static_cast<unsigned>(std::min(std::max<std::size_t>(work, 1), kMaxGrid)); }

}  // namespace

void LaunchFloat8WireEncode(const float* values, std::size_t runs, std::size_t length, std::size_t stride,
                            std::uint8_t* codes, float* scale_inv, cudaStream_t stream) {
  const std::size_t total = runs * ((length + kWireBlock - 1) / kWireBlock);
  if (total == 0) {
    return;
  }
  Float8WireEncodeKernel<<<GridOf((total + kEncodeWarps - 1) / kEncodeWarps), kEncodeThreads, 0, stream>>>(
      values, runs, length, stride, codes, scale_inv);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchFloat8WireDecodeSum(const std::uint8_t* codes, const float* scale_inv, std::size_t parts, std::size_t length,
                               float* out, cudaStream_t stream) {
  if (length == 0 || parts == 0) {
    return;
  }
  Float8WireDecodeSumKernel<<<GridOf((length + kSumChunk - 1) / kSumChunk), kSumThreads, 0, stream>>>(
      codes, scale_inv, parts, length, out);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
