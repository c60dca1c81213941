#include "mlframework/backends/cuda/LowBitSteps.cuh"

#include <string>

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/StepKernels.cuh"
#include "mlframework/core/StateCodes.hpp"
#include "mlframework/core/StepElements.hpp"

namespace mlframework::backends::cuda {

namespace {

namespace codes = mlframework::detail;

// 512 threads of 4 elements each: the 2,048-element tile, with every element's loads in flight
// before the first store and few enough unrolled copies of the element code to stay in the
// instruction cache.
constexpr int kThreads = static_cast<int>(kLowBitThreads);
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

// The 16 random bits of stochastic rounding (PhiloxElementBits()) of each of the thread's
// kPerThread elements, with one Philox call per thread where one per element took eight times
// the arithmetic: each lane draws one counter (RoundingCounterOfLane()) and takes the four words of
// its elements' counters from the lanes that drew them (RoundingSourceLane()). @p first: the
// Philox index of the tile's first element (the entry's element offset plus the tile's start).
// Every lane of the warp must call it (the shuffles take all 32).
__device__ __forceinline__ void RoundingBits(std::uint64_t seed, std::uint64_t step, std::uint32_t tensor,
                                             std::uint64_t first, std::uint16_t (&bits)[kPerThread]) {
  static_assert(kPerThread * 8 == 32, "one lane of the warp per counter of each k");
  const std::uint32_t lane = threadIdx.x & 31u;
  const std::uint64_t warp_first = first + (threadIdx.x & ~31u);  // lane 0's element at k = 0
  const Philox4x32Block drawn = PhiloxRoundingBlock(seed, step, tensor, RoundingCounterOfLane(lane, warp_first));
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const std::uint64_t lane0 = warp_first + static_cast<std::uint64_t>(k) * kThreads;
    const auto source = static_cast<int>(RoundingSourceLane(static_cast<std::uint32_t>(k), lane, lane0));
    Philox4x32Block block;
#pragma unroll
    for (int word = 0; word < 4; ++word) {
      block.Word[word] = __shfl_sync(0xffffffffu, drawn.Word[word], source);
    }
    bits[k] = PhiloxBlockHalf(block, static_cast<std::uint32_t>((lane0 + lane) % kPhiloxElementsPerBlock));
  }
}

// One state of the step, its format a template argument: every kernel holds the decode and
// encode of its two formats alone. (One kernel for all formats was 220 KB of machine code, which
// no instruction cache holds, and ran at a sixth of a copy's speed.)
template <StateFormat Format>
struct TileState {
  static constexpr bool kScaled = IsBlockScaled(Format);
  void* data;
  float* scales;
  bool keep_positive;  // the second moment
};

// Element @p i of state @p s, in block @p block_index of the tensor.
template <StateFormat Format>
__device__ __forceinline__ float Decode(const TileState<Format>& s, std::uint64_t block_index, std::uint64_t i) {
  return codes::DecodeStateElementInBlock(Format, s.data, TileState<Format>::kScaled ? s.scales[block_index] : 0.0f, i);
}

// After the update of element @p i: a state without scales is encoded at once; a block-scaled one
// adds the value's magnitude to its block's maximum in @p absmax (the value stays in the caller's
// registers).
template <StateFormat Format>
__device__ __forceinline__ void Collect(const TileState<Format>& s, bool in_range, std::uint64_t i, float value,
                                        std::uint32_t block_in_tile, std::uint32_t* absmax) {
  if constexpr (!TileState<Format>::kScaled) {
    if (in_range) {
      codes::EncodeStateElement(Format, s.data, i, value, 0.0f, s.keep_positive);
    }
  } else {
    const std::uint32_t bits = WarpMax(in_range ? codes::MagnitudeBits(value) : 0u);
    if ((threadIdx.x & 31u) == 0) {
      atomicMax(absmax + block_in_tile, bits);
    }
  }
}

// The scale and code factor (BlockCodeFactor()) of each of the tile's blocks of a block-scaled
// state from their maxima @p absmax, into @p scale and @p factor (shared memory) and the state's
// scales: one thread per block, each an IEEE division or two where every element took them before.
template <StateFormat Format>
__device__ __forceinline__ void BlockScales(const TileState<Format>& s, const LowBitEntry& e, std::uint64_t lo,
                                            std::uint32_t shift, const std::uint32_t* absmax, float* scale,
                                            float* factor) {
  if constexpr (TileState<Format>::kScaled) {
    const std::uint32_t b = threadIdx.x;
    if (b < (static_cast<std::uint32_t>(kLowBitTile) >> shift) &&
        lo + (static_cast<std::uint64_t>(b) << shift) < e.count) {
      scale[b] = codes::BlockScale(Format, codes::BitsAsFloat(absmax[b]));
      factor[b] = codes::BlockCodeFactor(Format, scale[b]);
      s.scales[(lo >> shift) + b] = scale[b];
    }
  }
}

// Encodes the updated @p values of a block-scaled state with its blocks' scales and factors
// (BlockScales(), blocks of 2^@p shift elements).
template <StateFormat Format>
__device__ __forceinline__ void Encode(const TileState<Format>& s, const LowBitEntry& e, std::uint64_t lo,
                                       std::uint32_t shift, const float* scale, const float* factor,
                                       const float (&values)[kPerThread]) {
  if constexpr (TileState<Format>::kScaled) {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const std::uint32_t offset = threadIdx.x + (static_cast<std::uint32_t>(k) * kThreads);
      const std::uint64_t i = lo + offset;
      if (i < e.count) {
        codes::EncodeBlockElement(Format, s.data, i, values[k], scale[offset >> shift], factor[offset >> shift],
                                  s.keep_positive);
      }
    }
  }
}

// One tile: decode, update(w, g, first, second) per element, encode. First: the first state's
// format, Second: the second's (unused when !kHasSecond); @p has_first: the entry has a first
// state (SGD without momentum has none); @p read_first: the update reads it (SGD's first step
// does not). Every load of the thread's elements comes before its first store: the compiler
// cannot know that the stores alias none of the loads, so an element-by-element loop would wait
// on each element's loads in turn.
template <StateFormat First, StateFormat Second, bool kHasSecond, class Update>
__device__ __forceinline__ void StepTile(const LowBitEntry* entries, std::int32_t count, const LowBitFormats& f,
                                         const std::int32_t* skip_flag, const float* step_count, bool read_first,
                                         Update&& update) {
  __shared__ std::uint32_t absmax[2][kMaxBlocks];
  __shared__ float block_scale[2][kMaxBlocks];
  __shared__ float block_factor[2][kMaxBlocks];
  if (StepSkipped(skip_flag)) {
    return;  // the scaler found an overflow: the step changes nothing
  }
  const std::uint64_t tile = blockIdx.x;
  // A copy in registers: through a reference into global memory, every store of the tile could
  // alias the entry, and the compiler would reload its pointers after each one.
  const LowBitEntry e = entries[EntryHolding(entries, count, tile, [](const LowBitEntry& x) { return x.tile; })];
  const std::uint64_t lo = (tile - e.tile) * kLowBitTile;
  // Block sizes are powers of two (FusedSteps.cpp checks): block indices by shifts.
  const auto shift = static_cast<std::uint32_t>(__ffs(static_cast<int>(f.block_size)) - 1);
  const std::uint64_t step = step_count != nullptr ? static_cast<std::uint64_t>(*step_count) + 1 : f.step;
  const bool has_first = e.first != nullptr;
  const TileState<First> first{e.first, e.first_scales, false};
  const TileState<Second> second{e.second, e.second_scales, true};
  if (threadIdx.x < 2 * kMaxBlocks) {
    absmax[threadIdx.x / kMaxBlocks][threadIdx.x % kMaxBlocks] = 0;
  }
  float w[kPerThread];
  float g[kPerThread];
  float m[kPerThread];
  float v[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const std::uint32_t offset = threadIdx.x + (static_cast<std::uint32_t>(k) * kThreads);
    const std::uint64_t i = lo + offset;
    const std::uint64_t block_index = i >> shift;
    w[k] = 0.0f;
    g[k] = 0.0f;
    m[k] = 0.0f;
    v[k] = 0.0f;
    if (i < e.count) {
      w[k] = codes::DecodeMasterElement(f.masters, e.parameter, e.remainders, i);
      g[k] = e.gradient[i];
      if (has_first && read_first) {
        m[k] = Decode(first, block_index, i);
      }
      if constexpr (kHasSecond) {
        v[k] = Decode(second, block_index, i);
      }
    }
  }
  const bool rounds = f.masters == MasterFormat::BFloat16StochasticRounding;  // the same in every thread
  std::uint16_t random[kPerThread] = {};
  if (rounds) {
    RoundingBits(f.seed, step, e.tensor, e.element_offset + lo, random);
  }
  __syncthreads();  // absmax is zeroed
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const std::uint32_t offset = threadIdx.x + (static_cast<std::uint32_t>(k) * kThreads);
    const std::uint64_t i = lo + offset;
    const bool in_range = i < e.count;
    if (in_range) {
      update(w[k], g[k], m[k], v[k], has_first);
      if (rounds) {
        static_cast<std::uint16_t*>(e.parameter)[i] = StochasticRoundToBFloat16Bits(w[k], random[k]);
      } else {
        codes::EncodeMasterElement(f.masters, e.parameter, e.remainders, i, w[k], f.seed, step, e.tensor,
                                   e.element_offset);
      }
      WriteCopy(e.low_precision, e.low_precision_dtype, i, w[k]);  // FP32 masters only (FusedSteps.cpp)
    }
    const std::uint32_t block_in_tile = offset >> shift;
    if (has_first) {
      Collect(first, in_range, i, m[k], block_in_tile, absmax[0]);
    }
    if constexpr (kHasSecond) {
      Collect(second, in_range, i, v[k], block_in_tile, absmax[1]);
    }
  }
  __syncthreads();
  if (has_first) {
    BlockScales(first, e, lo, shift, absmax[0], block_scale[0], block_factor[0]);
  }
  if constexpr (kHasSecond) {
    BlockScales(second, e, lo, shift, absmax[1], block_scale[1], block_factor[1]);
  }
  __syncthreads();
  if (has_first) {
    Encode(first, e, lo, shift, block_scale[0], block_factor[0], m);
  }
  if constexpr (kHasSecond) {
    Encode(second, e, lo, shift, block_scale[1], block_factor[1], v);
  }
}

template <StateFormat First, StateFormat Second>
__global__ void __launch_bounds__(kThreads)
    LowBitAdamKernel(const LowBitEntry* entries, std::int32_t count, LowBitFormats f, AdamStepScalars s,
                     const std::int32_t* skip_flag, const float* step_count) {
  const codes::AdamElementConstants c = codes::AdamConstantsOf(AdamScalarsAt(s, step_count));
  StepTile<First, Second, true>(
      entries, count, f, skip_flag, step_count, true,
      [&](float& w, float g, float& m, float& v, bool /*has_first*/) { codes::AdamUpdate(w, g, m, v, c); });
}

template <StateFormat First>
__global__ void __launch_bounds__(kThreads)
    LowBitSGDKernel(const LowBitEntry* entries, std::int32_t count, LowBitFormats f, SGDStepScalars s,
                    const std::int32_t* skip_flag, const float* step_count) {
  const SGDStepScalars at = SGDScalarsAt(s, step_count);
  StepTile<First, First, false>(entries, count, f, skip_flag, step_count, !at.FirstStep,
                                [&](float& w, float g, float& b, float& /*second*/, bool has_first) {
                                  // Two calls rather than a selected pointer: an address chosen at
                                  // run time would keep the tile's momentum values in local memory.
                                  if (has_first) {
                                    codes::SGDUpdate(w, g, &b, at);
                                  } else {
                                    codes::SGDUpdate(w, g, nullptr, at);
                                  }
                                });
}

using AdamKernel = void (*)(const LowBitEntry*, std::int32_t, LowBitFormats, AdamStepScalars, const std::int32_t*,
                            const float*);
using SGDKernel = void (*)(const LowBitEntry*, std::int32_t, LowBitFormats, SGDStepScalars, const std::int32_t*,
                           const float*);

[[noreturn]] void RefuseFormats(const LowBitFormats& f) {
  throw InvalidOperationError(std::string("the CUDA low-bit step has no kernel for first state ") + ToString(f.first) +
                              " and second state " + ToString(f.second));
}

// The Adam kernel for the first state @p First and the second state f.second (the formats
// FusedSteps.cpp accepts for exp_avg_sq).
template <StateFormat First>
AdamKernel AdamKernelFor(const LowBitFormats& f) {
  switch (f.second) {
    case StateFormat::Float32:
      return LowBitAdamKernel<First, StateFormat::Float32>;
    case StateFormat::BFloat16:
      return LowBitAdamKernel<First, StateFormat::BFloat16>;
    case StateFormat::Float16:
      return LowBitAdamKernel<First, StateFormat::Float16>;
    case StateFormat::UInt8Block:
      return LowBitAdamKernel<First, StateFormat::UInt8Block>;
    case StateFormat::Float8E4M3Block:
      return LowBitAdamKernel<First, StateFormat::Float8E4M3Block>;
    default:
      RefuseFormats(f);
  }
}

AdamKernel AdamKernelFor(const LowBitFormats& f) {
  switch (f.first) {
    case StateFormat::Float32:
      return AdamKernelFor<StateFormat::Float32>(f);
    case StateFormat::BFloat16:
      return AdamKernelFor<StateFormat::BFloat16>(f);
    case StateFormat::Float16:
      return AdamKernelFor<StateFormat::Float16>(f);
    case StateFormat::Int8Block:
      return AdamKernelFor<StateFormat::Int8Block>(f);
    case StateFormat::Float8E4M3Block:
      return AdamKernelFor<StateFormat::Float8E4M3Block>(f);
    default:
      RefuseFormats(f);
  }
}

// The SGD kernel for the momentum's format (the formats FusedSteps.cpp accepts for it).
SGDKernel SGDKernelFor(const LowBitFormats& f) {
  switch (f.first) {
    case StateFormat::Float32:
      return LowBitSGDKernel<StateFormat::Float32>;
    case StateFormat::BFloat16:
      return LowBitSGDKernel<StateFormat::BFloat16>;
    case StateFormat::Float16:
      return LowBitSGDKernel<StateFormat::Float16>;
    case StateFormat::Int8Block:
      return LowBitSGDKernel<StateFormat::Int8Block>;
    case StateFormat::Float8E4M3Block:
      return LowBitSGDKernel<StateFormat::Float8E4M3Block>;
    default:
      RefuseFormats(f);
  }
}

}  // namespace

void LaunchLowBitAdamStep(const LowBitEntry* entries, std::int32_t count, std::uint64_t tiles,
                          const LowBitFormats& formats, const AdamStepScalars& scalars, const std::int32_t* skip_flag,
                          const float* step_count, cudaStream_t stream) {
  AdamKernelFor(formats)<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(entries, count, formats, scalars,
                                                                                skip_flag, step_count);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchLowBitSGDStep(const LowBitEntry* entries, std::int32_t count, std::uint64_t tiles,
                         const LowBitFormats& formats, const SGDStepScalars& scalars, const std::int32_t* skip_flag,
                         const float* step_count, cudaStream_t stream) {
  SGDKernelFor(formats)<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(entries, count, formats, scalars,
                                                                               skip_flag, step_count);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
