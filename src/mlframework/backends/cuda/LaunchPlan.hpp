#pragma once
// Private: how a list of tensors becomes kernel launches (multi_tensor_apply).
//
// The tensors of one launch are seen as one virtual array (tensor s holds
// elements [offsets[s], offsets[s+1])) cut into equal chunks (ChunkElementsFor()); one
// block takes one chunk, which may span several small tensors, so every block
// does the same work whatever the tensor sizes. The tensor table travels as
// a kernel parameter (no metadata copy to the device, nothing to synchronise),
// which bounds a launch to kMaxTensorsPerLaunch tensors; longer lists take
// several launches. Plain C++ (host and device), so the planner is tested on the host.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/core/DataType.hpp>
#include <mlframework/core/HostDevice.hpp>

namespace mlframework::backends::cuda {

/// Tensors per launch. The table must fit the kernel-parameter limit, 32,764 bytes since CUDA 12.1
/// on every architecture the backend builds for (it was 4 KiB before). Every launch costs the host
/// microseconds, and a launch of few small tensors has too few blocks to fill the GPU: on an H100,
/// 10,000 tensors of 1,000 elements took 3-4x as long at 128 tensors a launch as at 1,024
/// (docs/BENCHMARKS.md, "CUDA kernels").
inline constexpr int kMaxTensorsPerLaunch = 1024;
/// Elements per block, a power of two from kMinChunkElements to kMaxChunkElements (see
/// ChunkElementsFor()). Measured on an H100 (docs/BENCHMARKS.md, "CUDA kernels"): kernels that
/// write run best with the small chunk everywhere (one round of loads per thread); read-only
/// kernels over large launches run best with large chunks, which cut the fixed cost of a block
/// (its barrier, flag and partial sum). Small chunks keep a launch of small tensors spread over
/// the whole GPU either way.
inline constexpr std::uint64_t kMinChunkElements = 4096;
inline constexpr std::uint64_t kMaxChunkElements = 16384;
/// A read-only launch's chunk grows while the launch keeps at least this many blocks.
inline constexpr std::uint64_t kBlocksPerLaunch = 1024;

/// What a kernel does with its tensors, which decides its chunk size.
enum class Access {
  ReadOnly,  ///< checks and reductions: chunks grow with the launch
  Writes,    ///< in-place updates and casts: always kMinChunkElements
};
/// Threads per block of the multi-tensor kernels.
inline constexpr int kBlockThreads = 512;
/// Threads of the one-block sum-of-squares finalisation kernel.
inline constexpr int kFinalizeThreads = 256;

/// The tensor table of one launch (passed by value as a __grid_constant__ kernel parameter).
/// Slot 0 is the source (or the tensor updated in place), slot 1 the destination of a cast.
struct TensorListMeta {
  void* data[2][kMaxTensorsPerLaunch];
  std::uint64_t offsets[kMaxTensorsPerLaunch + 1];
  std::uint8_t dtype[2][kMaxTensorsPerLaunch];
  std::int32_t count;
  std::uint32_t chunk_elements;  // elements per block (ChunkElementsFor())
};
static_assert(sizeof(TensorListMeta) + 64 <= 32764, "kernel parameters must stay under 32,764 bytes");

/// Where a kernel takes its multiplier from.
enum class FactorMode : std::int32_t {
  Value,           ///< FactorSource::value
  Scale,           ///< *FactorSource::scale (device memory)
  InverseOfScale,  ///< InverseScale(*FactorSource::scale) (device memory)
};

/// A multiplier given on the host or read on the device.
struct FactorSource {
  float value = 1.0f;
  FactorMode mode = FactorMode::Value;
  const float* scale = nullptr;  // device pointer for Scale / InverseOfScale
};

/// Flag and sum written by the reductions, read back in one copy.
struct DeviceResult {
  std::int32_t flag;
  std::int32_t padding;
  double sum;
};

/// Device-resident dynamic-scaling state (see DeviceScaling.hpp).
struct DeviceScaleBlock {
  amp::ScaleState state;
  std::int32_t found_inf;
  std::int32_t last_skipped;
};

/// Elements per block for a launch of @p total elements: kMinChunkElements for kernels that
/// write; for read-only kernels the largest power of two up to kMaxChunkElements that still
/// gives kBlocksPerLaunch blocks.
inline std::uint64_t ChunkElementsFor(std::uint64_t total, Access access) {
  std::uint64_t chunk = kMinChunkElements;
  while (access == Access::ReadOnly && chunk < kMaxChunkElements && total / (2 * chunk) >= kBlocksPerLaunch) {
    chunk *= 2;
  }
  return chunk;
}

/// One entry of a list: source (or in-place) and destination pointers, dtypes, element count.
struct ListEntry {
  void* src = nullptr;
  void* dst = nullptr;
  DataType src_dtype = DataType::Float32;
  DataType dst_dtype = DataType::Float32;
  std::uint64_t size = 0;
};

/// One launch: its tensor table and grid size (blocks == chunks of its virtual array).
struct Launch {
  TensorListMeta meta;
  std::uint32_t blocks;
};

/// Cuts @p entries into launches of at most kMaxTensorsPerLaunch tensors, in order, with the
/// chunk size of @p access; empty tensors are dropped (so offsets strictly increase). No launch
/// for an empty list.
inline std::vector<Launch> PlanLaunches(std::span<const ListEntry> entries, Access access) {
  // Each Launch is about 26 KB: filled where it lies in the vector, never copied.
  std::vector<Launch> launches;
  launches.reserve((entries.size() + kMaxTensorsPerLaunch - 1) / kMaxTensorsPerLaunch);
  Launch* current = nullptr;
  std::uint64_t total = 0;
  auto close = [&] {
    const std::uint64_t chunk = ChunkElementsFor(total, access);
    current->meta.offsets[current->meta.count] = total;
    current->meta.chunk_elements = static_cast<std::uint32_t>(chunk);
    current->blocks = static_cast<std::uint32_t>((total + chunk - 1) / chunk);
    current = nullptr;
    total = 0;
  };
  for (const ListEntry& entry : entries) {
    if (entry.size == 0) {
      continue;
    }
    if (current == nullptr) {
      current = &launches.emplace_back();
    }
    const std::int32_t s = current->meta.count;
    current->meta.data[0][s] = entry.src;
    current->meta.data[1][s] = entry.dst;
    current->meta.dtype[0][s] = static_cast<std::uint8_t>(entry.src_dtype);
    current->meta.dtype[1][s] = static_cast<std::uint8_t>(entry.dst_dtype);
    current->meta.offsets[s] = total;
    total += entry.size;
    current->meta.count = s + 1;
    if (current->meta.count == kMaxTensorsPerLaunch) {
      close();
    }
  }
  if (current != nullptr) {
    close();
  }
  return launches;
}

/// Total blocks of @p launches (one FP32 partial each in the sum of squares).
inline std::size_t TotalBlocks(std::span<const Launch> launches) {
  std::size_t blocks = 0;
  for (const Launch& launch : launches) {
    blocks += launch.blocks;
  }
  return blocks;
}

/// Calls fn(s, lo, hi) for each piece of chunk @p block of @p list, in order: elements [lo, hi)
/// of tensor s. The kernels call it with blockIdx.x; the host tests call it for every block.
template <typename Fn>
MLFW_HOST_DEVICE inline void ForEachPieceOfBlock(const TensorListMeta& list, std::uint64_t block, Fn&& fn) {
  const std::uint64_t total = list.offsets[list.count];
  const std::uint64_t chunk = list.chunk_elements;
  const std::uint64_t begin = block * chunk;
  const std::uint64_t end = begin + chunk < total ? begin + chunk : total;
  // The tensor holding `begin`: offsets[lo] <= begin < offsets[hi] (offsets strictly increase).
  int lo = 0;
  int hi = list.count;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (list.offsets[mid] <= begin) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  for (int s = lo; s < list.count && list.offsets[s] < end; ++s) {
    const std::uint64_t first = list.offsets[s];
    const std::uint64_t last = list.offsets[s + 1];
    const std::uint64_t piece_lo = begin > first ? begin - first : 0;
    const std::uint64_t piece_hi = (end < last ? end : last) - first;
    if (piece_hi > piece_lo) {
      fn(s, piece_lo, piece_hi);
    }
  }
}

}  // namespace mlframework::backends::cuda
