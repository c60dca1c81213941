#include "mlframework/backends/cuda/LowBitSteps.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/StepKernels.cuh"
#include "mlframework/core/StateCodes.hpp"
#include "mlframework/core/StepElements.hpp"

namespace mlframework::backends::cuda {

namespace {

namespace codes = mlframework::detail;

constexpr int kThreads = 256;
constexpr int kPerThread = static_cast<int>(kLowBitTile) / kThreads;
// Blocks of the smallest block size (32 elements) in a tile: one warp's elements lie in one block.
constexpr int kMaxBlocks = static_cast<int>(kLowBitTile) / 32;

// The largest of the warp's 32 values (max is exact: any order gives the same bits).
__device__ std::uint32_t WarpMax(std::uint32_t bits) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const std::uint32_t other = __shfl_xor_sync(0xffffffffu, bits, offset);
    bits = other > bits ? other : bits;
  }
  return bits;
}

// One state of a tile: its format and codes, and, block-scaled, its values kept in registers
// until the tile's block maxima are known.
struct TileState {
  StateFormat format;
  void* data;
  float* scales;
  bool keep_positive;  // the second moment
  bool scaled;
  float values[kPerThread];
};

// After the update of element @p i (slot @p k): a state without scales is encoded at once; a
// block-scaled one keeps the value and adds its magnitude to its block's maximum in @p absmax.
__device__ __forceinline__ void Collect(TileState& s, int k, bool in_range, std::uint64_t i, float value,
                                        std::uint32_t block_in_tile, std::uint32_t* absmax) {
  if (!s.scaled) {
    if (in_range) {
      codes::EncodeStateElement(s.format, s.data, i, value, 0.0f, s.keep_positive);
    }
    return;
  }
  s.values[k] = value;
  const std::uint32_t bits = WarpMax(in_range ? codes::MagnitudeBits(value) : 0u);
  if ((threadIdx.x & 31u) == 0) {
    atomicMax(absmax + block_in_tile, bits);
  }
}

// Encodes the kept values of a block-scaled state with the tile's block maxima, and writes the
// scales of the tile's blocks.
__device__ __forceinline__ void Encode(TileState& s, const LowBitEntry& e, std::uint64_t lo, std::uint32_t block,
                                       const std::uint32_t* absmax) {
  if (!s.scaled) {
    return;
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const std::uint64_t offset = threadIdx.x + static_cast<std::uint64_t>(k) * kThreads;
    const std::uint64_t i = lo + offset;
    if (i < e.count) {
      const float scale = codes::BlockScale(s.format, codes::BitsAsFloat(absmax[offset / block]));
      codes::EncodeStateElement(s.format, s.data, i, s.values[k], scale, s.keep_positive);
    }
  }
  const std::uint32_t b = threadIdx.x;
  if (b < kLowBitTile / block && lo + static_cast<std::uint64_t>(b) * block < e.count) {
    s.scales[lo / block + b] = codes::BlockScale(s.format, codes::BitsAsFloat(absmax[b]));
  }
}

// One tile: decode, update(w, g, first, second) per element (first: null without a first
// state), encode. @p read_first: the update reads the first state (SGD's first step does not).
template <class Update>
__device__ __forceinline__ void StepTile(const LowBitEntry* entries, std::int32_t count, const LowBitFormats& f,
                                         const std::int32_t* skip_flag, const float* step_count, bool has_second,
                                         bool read_first, Update&& update) {
  __shared__ std::uint32_t absmax[2][kMaxBlocks];
  if (StepSkipped(skip_flag)) {
    return;  // the scaler found an overflow: the step changes nothing
  }
  const std::uint64_t tile = blockIdx.x;
  const LowBitEntry& e = entries[EntryHolding(entries, count, tile, [](const LowBitEntry& x) { return x.tile; })];
  const std::uint64_t lo = (tile - e.tile) * kLowBitTile;
  const std::uint32_t block = f.block_size;
  const std::uint64_t step = step_count != nullptr ? static_cast<std::uint64_t>(*step_count) + 1 : f.step;
  const bool has_first = e.first != nullptr;
  TileState first{f.first, e.first, e.first_scales, false, e.first_scales != nullptr, {}};
  TileState second{f.second, e.second, e.second_scales, true, has_second && e.second_scales != nullptr, {}};
  if (threadIdx.x < 2 * kMaxBlocks) {
    absmax[threadIdx.x / kMaxBlocks][threadIdx.x % kMaxBlocks] = 0;
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const std::uint64_t offset = threadIdx.x + static_cast<std::uint64_t>(k) * kThreads;
    const std::uint64_t i = lo + offset;
    const bool in_range = i < e.count;
    float m = 0.0f;
    float v = 0.0f;
    if (in_range) {
      float w = codes::DecodeMasterElement(f.masters, e.parameter, e.remainders, i);
      if (has_first && read_first) {
        m = codes::DecodeStateElement(f.first, e.first, e.first_scales, block, i);
      }
      if (has_second) {
        v = codes::DecodeStateElement(f.second, e.second, e.second_scales, block, i);
      }
      update(w, e.gradient[i], has_first ? &m : nullptr, v);
      codes::EncodeMasterElement(f.masters, e.parameter, e.remainders, i, w, f.seed, step, e.tensor, e.element_offset);
      WriteCopy(e.low_precision, e.low_precision_dtype, i, w);  // FP32 masters only (FusedSteps.cpp)
    }
    const auto block_in_tile = static_cast<std::uint32_t>(offset / block);
    if (has_first) {
      Collect(first, k, in_range, i, m, block_in_tile, absmax[0]);
    }
    if (has_second) {
      Collect(second, k, in_range, i, v, block_in_tile, absmax[1]);
    }
  }
  __syncthreads();
  Encode(first, e, lo, block, absmax[0]);
  Encode(second, e, lo, block, absmax[1]);
}

__global__ void __launch_bounds__(kThreads)
    LowBitAdamKernel(const LowBitEntry* entries, std::int32_t count, LowBitFormats f, AdamStepScalars s,
                     const std::int32_t* skip_flag, const float* step_count) {
  const codes::AdamElementConstants c = codes::AdamConstantsOf(AdamScalarsAt(s, step_count));
  StepTile(entries, count, f, skip_flag, step_count, true, true,
           [&](float& w, float g, float* m, float& v) { codes::AdamUpdate(w, g, *m, v, c); });
}

__global__ void __launch_bounds__(kThreads)
    LowBitSGDKernel(const LowBitEntry* entries, std::int32_t count, LowBitFormats f, SGDStepScalars s,
                    const std::int32_t* skip_flag, const float* step_count) {
  const SGDStepScalars at = SGDScalarsAt(s, step_count);
  StepTile(entries, count, f, skip_flag, step_count, false, !at.FirstStep,
           [&](float& w, float g, float* b, float& /*second*/) { codes::SGDUpdate(w, g, b, at); });
}

}  // namespace

void LaunchLowBitAdamStep(const LowBitEntry* entries, std::int32_t count, std::uint64_t tiles,
                          const LowBitFormats& formats, const AdamStepScalars& scalars, const std::int32_t* skip_flag,
                          const float* step_count, cudaStream_t stream) {
  LowBitAdamKernel<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(entries, count, formats, scalars, skip_flag,
                                                                          step_count);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchLowBitSGDStep(const LowBitEntry* entries, std::int32_t count, std::uint64_t tiles,
                         const LowBitFormats& formats, const SGDStepScalars& scalars, const std::int32_t* skip_flag,
                         const float* step_count, cudaStream_t stream) {
  LowBitSGDKernel<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(entries, count, formats, scalars, skip_flag,
                                                                         step_count);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
