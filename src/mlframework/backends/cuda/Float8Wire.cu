// The FP8 block wire's kernels. The encoder runs one thread block per wire block (one thread
// per value: load, a warp and block maximum of the magnitude bits, the scale exponent, the
// code); the decoding sum one thread per output value over the parts in rank order. The math
// is core/Float8BlockMath.hpp's, which the CPU codec's element kernels share: single IEEE
// multiplies by powers of two (exact) and integer rounding, and the sum's additions are
// __fadd_rn so that nvcc cannot contract a product into them.
#include "mlframework/backends/cuda/Float8Wire.cuh"

#include <algorithm>

#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/core/Float8BlockMath.hpp"

namespace mlframework::backends::cuda {

namespace {

constexpr int kWireBlock = static_cast<int>(Float8BlockRuns::kBlockValues);
constexpr int kWarps = kWireBlock / 32;
static_assert(kWireBlock % 32 == 0 && kWireBlock <= 1024, "one thread per value of a wire block");

// Grid sizes: enough blocks to fill any GPU many times over; the kernels stride past them.
constexpr std::size_t kMaxGrid = std::size_t{1} << 20;
constexpr int kSumThreads = 256;

__global__ void __launch_bounds__(kWireBlock)
    Float8WireEncodeKernel(const float* values, std::size_t runs, std::size_t length, std::size_t stride,
                           std::uint8_t* codes, float* scale_inv) {
  __shared__ std::uint32_t warp_amax[kWarps];
  const std::size_t per_run = (length + kWireBlock - 1) / kWireBlock;
  const std::size_t total = runs * per_run;
  const unsigned lane = threadIdx.x % 32u;
  const unsigned warp = threadIdx.x / 32u;
  for (std::size_t b = blockIdx.x; b < total; b += gridDim.x) {
    const std::size_t run = b / per_run;
    const std::size_t block = b % per_run;
    const std::size_t i = (block * kWireBlock) + threadIdx.x;
    const bool inside = i < length;
    const float x = inside ? values[(run * stride) + i] : 0.0f;
    // Magnitude bits order as the magnitudes do, NaN and infinity above every number.
    const std::uint32_t magnitude = inside ? (detail::FloatAsBits(x) & 0x7fffffffu) : 0u;
    const std::uint32_t warp_max = __reduce_max_sync(0xffffffffu, magnitude);
    if (lane == 0) {
      warp_amax[warp] = warp_max;
    }
    __syncthreads();
    std::uint32_t amax = warp_amax[0];
    for (int w = 1; w < kWarps; ++w) {
      amax = max(amax, warp_amax[w]);
    }
    __syncthreads();  // the next block's maxima overwrite warp_amax
    std::uint8_t code = 0;
    float inverse = detail::Float8BlockNaNScale();
    if (!detail::Float8BlockIsNonFinite(amax)) {
      const int k = detail::Float8BlockScaleExponent(amax);
      code = detail::EncodeFloat8BlockElement(x, detail::Float8BlockPowerOfTwo(k));
      inverse = detail::Float8BlockPowerOfTwo(-k);
    }
    if (inside) {
      codes[(run * length) + i] = code;
    }
    if (threadIdx.x == 0) {
      scale_inv[(run * per_run) + block] = inverse;
    }
  }
}

__global__ void __launch_bounds__(kSumThreads)
    Float8WireDecodeSumKernel(const std::uint8_t* codes, const float* scale_inv, std::size_t parts, std::size_t length,
                              float* out) {
  const std::size_t blocks = (length + kWireBlock - 1) / kWireBlock;
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = (static_cast<std::size_t>(blockIdx.x) * blockDim.x) + threadIdx.x; i < length; i += step) {
    const std::size_t block = i / kWireBlock;
    float sum = detail::DecodeFloat8BlockElement(codes[i], scale_inv[block]);
    for (std::size_t p = 1; p < parts; ++p) {
      sum = __fadd_rn(sum, detail::DecodeFloat8BlockElement(codes[(p * length) + i], scale_inv[(p * blocks) + block]));
    }
    out[i] = sum;
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
  Float8WireEncodeKernel<<<GridOf(total), kWireBlock, 0, stream>>>(values, runs, length, stride, codes, scale_inv);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchFloat8WireDecodeSum(const std::uint8_t* codes, const float* scale_inv, std::size_t parts, std::size_t length,
                               float* out, cudaStream_t stream) {
  if (length == 0 || parts == 0) {
    return;
  }
  Float8WireDecodeSumKernel<<<GridOf((length + kSumThreads - 1) / kSumThreads), kSumThreads, 0, stream>>>(
      codes, scale_inv, parts, length, out);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
