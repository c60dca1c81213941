#pragma once
// Private: how a list of tensors becomes one kernel launch (multi_tensor_apply).
//
// The tensors of a call are seen as one virtual array (tensor s holds elements
// [offsets[s], offsets[s+1])) cut into equal chunks (ChunkElementsFor()); one
// block takes one chunk, which may span several small tensors, so every block
// does the same work whatever the tensor sizes. The tensors' pointers, offsets
// and dtypes form a table image (TableView). A small image travels inside the
// launch (kernel parameters: no copy, nothing to wait for); a larger one is
// copied to device memory first, so that a list of any length is one launch,
// and kept there for the next call on the same memory (DeviceContext::Stage,
// TableCache.hpp). One launch for the whole list, because on an H100 each
// launch with a 26 KB parameter table costs the host about 18 us, and a launch of
// a few small tensors has too few blocks to fill the GPU. Plain C++ (host and
// device), so the planner is tested on the host.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/HostDevice.hpp>
#include <mlframework/core/ScalePolicy.hpp>

namespace mlframework::backends::cuda {

/// Elements per block, a power of two from kMinChunkElements to kMaxChunkElements (see
/// ChunkElementsFor()). Measured on an H100: kernels that write run best with the small chunk
/// everywhere (one round of loads per thread); read-only kernels over large launches run best
/// with large chunks, which cut the fixed cost of a block (its barrier, flag and partial sum).
/// Small chunks keep a launch of small tensors spread over the whole GPU either way.
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
/// Blocks of the vectorised kernels (ForEachStored()) resident on one multiprocessor: 2,048
/// threads, the most an H100's holds. It caps them at 32 registers a thread (without it ptxas
/// took 40-64, which leaves room for one or two blocks).
inline constexpr int kMinBlocksPerMultiprocessor = 4;
/// Threads of the one-block sum-of-squares finalisation kernel.
inline constexpr int kFinalizeThreads = 256;

/// Table images up to this size travel inside the launch. A launch's host cost grows with its
/// parameter block (about 7 us at 4 KB, 18 us at 26 KB on the H100 machine), and a copy of the
/// image costs a host call and a transfer ahead of the kernel; 2 KB holds a list of
/// kInlineTableTensors tensors.
inline constexpr std::size_t kInlineTableBytes = 2048;

/// Bytes of the table image of @p count tensors: void* data[2][count], then std::uint64_t
/// offsets[count + 1], then std::uint8_t dtype[2][count], rounded up to 8 bytes.
MLFW_HOST_DEVICE constexpr std::size_t TableBytes(std::size_t count) {
  return (2 * sizeof(void*) * count + sizeof(std::uint64_t) * (count + 1) + 2 * count + 7) / 8 * 8;
}
/// The most tensors whose image fits inline.
inline constexpr std::size_t kInlineTableTensors =
    (kInlineTableBytes - sizeof(std::uint64_t)) / (2 * sizeof(void*) + sizeof(std::uint64_t) + 2);
static_assert(TableBytes(kInlineTableTensors) <= kInlineTableBytes &&
                  TableBytes(kInlineTableTensors + 1) > kInlineTableBytes,
              "kInlineTableTensors is the largest list whose image fits inline");

/// The arrays of a table image (host or device memory). Slot 0 is the source (or the tensor
/// updated in place), slot 1 the destination of a cast.
struct TableView {
  void* const* data[2];
  const std::uint64_t* offsets;
  const std::uint8_t* dtype[2];
  std::int32_t count;
  std::uint32_t chunk_elements;  // elements per block (ChunkElementsFor())

  /// The view of the image of @p count tensors at @p image (8-byte aligned).
  MLFW_HOST_DEVICE static TableView Of(const std::byte* image, std::int32_t count, std::uint32_t chunk_elements) {
    const auto n = static_cast<std::size_t>(count);
    TableView view{};
    view.data[0] = reinterpret_cast<void* const*>(image);
    view.data[1] = view.data[0] + n;
    view.offsets = reinterpret_cast<const std::uint64_t*>(image + 2 * sizeof(void*) * n);
    view.dtype[0] = reinterpret_cast<const std::uint8_t*>(view.offsets + n + 1);
    view.dtype[1] = view.dtype[0] + n;
    view.count = count;
    view.chunk_elements = chunk_elements;
    return view;
  }
};

/// The table of one launch, passed by value as a __grid_constant__ kernel parameter: the
/// image lies in `inline_image`, or in device memory at `uploaded` when it is larger.
struct LaunchTable {
  const std::byte* uploaded = nullptr;
  std::int32_t count = 0;
  std::uint32_t chunk_elements = 0;
  alignas(8) std::byte inline_image[kInlineTableBytes];

  MLFW_HOST_DEVICE TableView View() const {
    return TableView::Of(uploaded != nullptr ? uploaded : inline_image, count, chunk_elements);
  }
};

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
  float amax;  ///< the amax kernels' answer (raised with atomicMax on its bits)
  double sum;
};

/// Device-resident dynamic-scaling state (see DeviceScaling.hpp).
struct DeviceScaleBlock {
  ScaleState state;
  std::int32_t found_inf;
  std::int32_t last_skipped;
  float amax;  ///< DeviceScaleState::Amax(): raised with atomicMax on its bits (non-negative floats order as integers)
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

/// The launch of a list: its table (count, chunk size) and grid size, before the image is written.
struct TableShape {
  std::int32_t count = 0;   ///< non-empty tensors (empty ones are dropped)
  std::uint64_t total = 0;  ///< elements of the virtual array
  std::uint32_t chunk_elements = 0;
  std::uint32_t blocks = 0;  ///< chunks of the virtual array, one block each; 0: nothing to launch
  std::size_t bytes = 0;     ///< TableBytes(count)
};

/// One launch: its table and grid size (DeviceContext::Stage fills the image).
struct Launch {
  LaunchTable table;
  std::uint32_t blocks = 0;
};

/// The shape of the one launch of a list of @p count non-empty tensors holding @p total
/// elements, with the chunk size of @p access (a kept table knows both without the list).
inline TableShape ShapeOfTotal(std::int32_t count, std::uint64_t total, Access access) {
  TableShape shape;
  shape.count = count;
  shape.total = total;
  const std::uint64_t chunk = ChunkElementsFor(shape.total, access);
  shape.chunk_elements = static_cast<std::uint32_t>(chunk);
  // The grid holds 2^31 - 1 blocks: 8.8e12 elements of 4,096-element chunks, far more than any
  // GPU holds.
  shape.blocks = static_cast<std::uint32_t>((shape.total + chunk - 1) / chunk);
  shape.bytes = TableBytes(static_cast<std::size_t>(shape.count));
  return shape;
}

/// The shape of the one launch of @p entries with the chunk size of @p access.
inline TableShape ShapeOf(std::span<const ListEntry> entries, Access access) {
  std::int32_t count = 0;
  std::uint64_t total = 0;
  for (const ListEntry& entry : entries) {
    if (entry.size != 0) {
      ++count;
      total += entry.size;
    }
  }
  return ShapeOfTotal(count, total, access);
}

/// Writes the table image of the non-empty entries of @p entries, in order, to @p image
/// (shape.bytes, 8-byte aligned); empty tensors are dropped, so offsets strictly increase.
inline void WriteTable(std::span<const ListEntry> entries, const TableShape& shape, std::byte* image) {
  const auto n = static_cast<std::size_t>(shape.count);
  // memcpy into the byte image: well defined whatever the image's memory (pinned, parameters).
  std::byte* const data = image;
  std::byte* const offsets = image + 2 * sizeof(void*) * n;
  std::byte* const dtypes = offsets + sizeof(std::uint64_t) * (n + 1);
  std::size_t s = 0;
  std::uint64_t total = 0;
  for (const ListEntry& entry : entries) {
    if (entry.size == 0) {
      continue;
    }
    std::memcpy(data + sizeof(void*) * s, &entry.src, sizeof(void*));
    std::memcpy(data + sizeof(void*) * (n + s), &entry.dst, sizeof(void*));
    std::memcpy(offsets + sizeof(std::uint64_t) * s, &total, sizeof total);
    dtypes[s] = static_cast<std::byte>(entry.src_dtype);
    dtypes[n + s] = static_cast<std::byte>(entry.dst_dtype);
    total += entry.size;
    ++s;
  }
  std::memcpy(offsets + sizeof(std::uint64_t) * n, &total, sizeof total);
}

/// Calls fn(s, lo, hi) for each piece of chunk @p block of @p list, in order: elements [lo, hi)
/// of tensor s. The kernels call it with blockIdx.x; the host tests call it for every block.
/// The tensor where the chunk starts is found by binary search over the offsets, whose first
/// levels every block reads, so they stay in cache.
template <typename Fn>
MLFW_HOST_DEVICE inline void ForEachPieceOfBlock(const TableView& list, std::uint64_t block, Fn&& fn) {
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
