#pragma once
// Private: the fused optimizer steps on the GPU whose masters or states are not FP32
// (MasterFormat, StateFormat in core/OptimizerStep.hpp). One launch per list: each thread block
// takes one tile of kLowBitTile elements of one tensor (tiles never span two tensors, so every
// block of a block-scaled state lies inside one tile), decodes the tile's masters and states into
// FP32 registers, runs the FP32 update of the FP32 step on them (core/StepElements.hpp), reduces
// each block's largest magnitude (a max, exact in any order), and encodes the states with the new
// scales and the masters (core/StateCodes.hpp, core/Philox.hpp): memory is read and written once,
// and the bits are the CPU backend's. The found-inf flag and a device step count work as in
// OptimizerSteps.cuh.

#include <cstdint>

#include <cuda_runtime_api.h>

#include <mlframework/core/HostDevice.hpp>
#include <mlframework/core/OptimizerStep.hpp>

namespace mlframework::backends::cuda {

/// One non-empty tensor of a low-bit fused step, as the kernels read it from device memory.
struct LowBitEntry {
  void* parameter;                    // FP32 masters, or BF16 parameters
  const float* gradient;              // FP32
  void* first;                        // exp_avg / momentum codes; null for SGD without momentum
  void* second;                       // exp_avg_sq codes; null for SGD
  float* first_scales;                // block scales of a block-scaled first state, else null
  float* second_scales;               // likewise for the second state
  std::uint16_t* remainders;          // BFloat16Remainder masters, else null
  void* low_precision;                // null, or the FP16/BF16 copy of the updated FP32 master
  std::uint64_t tile;                 // first tile of this tensor among the list's tiles
  std::uint64_t count;                // elements
  std::uint64_t element_offset;       // the Philox index of element 0 (OptimizerStepLists::ElementOffsets)
  std::uint32_t tensor;               // index of the tensor in the lists (the Philox counter)
  std::uint32_t low_precision_dtype;  // DataType of low_precision
};

/// How one low-bit step stores its masters and states (OptimizerStepLists' fields).
struct LowBitFormats {
  StateFormat first = StateFormat::Float32;
  StateFormat second = StateFormat::Float32;
  MasterFormat masters = MasterFormat::Float32;
  std::uint32_t block_size = 256;  // elements per scale of the block-scaled states
  std::uint64_t seed = 0;          // Philox key of stochastic rounding
  std::uint64_t step = 0;          // the step in its counter (a device step count: count + 1)
};

/// Elements of one tile (one thread block): a multiple of every block size (at most 2048).
inline constexpr std::uint64_t kLowBitTile = 2048;

/// Tiles of a tensor of @p count elements.
constexpr std::uint64_t LowBitTiles(std::uint64_t count) { return (count + kLowBitTile - 1) / kLowBitTile; }

/// Threads of a tile's thread block: thread t holds elements t + k * kLowBitThreads of the tile,
/// k from 0 to kLowBitTile / kLowBitThreads - 1 (4).
inline constexpr std::uint32_t kLowBitThreads = 512;

/// Stochastic rounding's Philox counters in a warp (one drawn per thread, LowBitSteps.cu): the
/// counter lane @p lane draws when the warp's lane 0 holds the element of Philox index
/// @p warp_first at k = 0: counter j = lane % 8 from the one of lane 0's element at k = lane / 8.
MLFW_HOST_DEVICE constexpr std::uint64_t RoundingCounterOfLane(std::uint32_t lane, std::uint64_t warp_first) {
  return (warp_first + static_cast<std::uint64_t>(lane / 8u) * kLowBitThreads) / 8u + lane % 8u;
}

/// The lane whose counter (RoundingCounterOfLane()) holds the random bits of element @p k of lane
/// @p lane, when lane 0's element at that k has Philox index @p lane0: the warp's 32 consecutive
/// elements there span at most five counters, the ones of lanes 8k to 8k + 4.
MLFW_HOST_DEVICE constexpr std::uint32_t RoundingSourceLane(std::uint32_t k, std::uint32_t lane, std::uint64_t lane0) {
  return k * 8u + (static_cast<std::uint32_t>(lane0 % 8u) + lane) / 8u;
}

/// Queues the Adam step over @p count entries at @p entries (device memory, followed by one
/// sentinel entry whose tile is the list's tile count @p tiles), as LaunchAdamStep() does.
void LaunchLowBitAdamStep(const LowBitEntry* entries, std::int32_t count, std::uint64_t tiles,
                          const LowBitFormats& formats, const AdamStepScalars& scalars, const std::int32_t* skip_flag,
                          const float* step_count, cudaStream_t stream);
/// The SGD step over the same kind of table (the second state unused).
void LaunchLowBitSGDStep(const LowBitEntry* entries, std::int32_t count, std::uint64_t tiles,
                         const LowBitFormats& formats, const SGDStepScalars& scalars, const std::int32_t* skip_flag,
                         const float* step_count, cudaStream_t stream);

}  // namespace mlframework::backends::cuda
