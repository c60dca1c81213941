#pragma once
// Private: the chunk plan of a list of CPU tensors.
//
// A list of tensors is seen as one long virtual array cut into chunks of kChunkElements;
// OpenMP threads take chunks, and a chunk may span several small tensors, so 10,000 tiny
// tensors cost about what one flat tensor of the same size costs. The element loops dispatch on
// dtype once per piece (a run of one segment inside one chunk).

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include <mlframework/core/DataType.hpp>

namespace mlframework::backends::cpu {

/// Elements per chunk: large enough to amortise scheduling, small enough to balance 10k tensors.
inline constexpr std::size_t kChunkElements = 32768;
/// Calls over at least this many bytes (a list's, or a cast's source and destination together)
/// run FromMemoryKernels() (KernelTable.hpp): casts write with non-temporal stores, and the loops
/// prefetch in software where SoftwarePrefetch() is true. Smaller ones run KernelTable::cached.
inline constexpr std::size_t kFromMemoryBytes = std::size_t{16} << 20;

/// True when a call over @p bytes streams from memory (kFromMemoryBytes): it runs the from_memory
/// kernels, and visiting its tensors in address order pays for the sort (AddressOrder.hpp).
inline bool FromMemory(std::size_t bytes) { return bytes >= kFromMemoryBytes; }

/// A run of memory of one dtype.
struct Segment {
  std::byte* data;
  DataType dtype;

  void* At(std::size_t element) const { return data + element * ElementSize(dtype); }
  bool operator==(const Segment&) const = default;
};

/// A list as one virtual array of segments. Tensors that lie back to back in memory (a
/// ZerosContiguous() list, a flat gradient buffer) are joined into one segment: the element
/// loops are per element, so a run of adjacent tensors of one dtype is one piece of memory to
/// them, streamed without a call, a head and a tail per tensor. Only exact adjacency joins: a gap
/// may hold memory that is not in the list.
struct Plan {
  std::vector<Segment> segments;
  std::vector<std::size_t> offsets;  // where each segment starts in the virtual array; then total
  std::size_t total = 0;
  std::size_t bytes = 0;
  std::size_t chunks = 0;

  Plan() = default;
  explicit Plan(std::size_t tensors) {
    segments.reserve(tensors);
    offsets.reserve(tensors + 1);
  }

  /// True when memory at @p data in @p dtype starts exactly where the last segment ends.
  bool Continues(const void* data, DataType dtype) const {
    return !segments.empty() && segments.back().dtype == dtype && segments.back().At(total - offsets.back()) == data;
  }
  bool Continues(const Segment& segment) const { return Continues(segment.data, segment.dtype); }
  /// True when the first segment of @p part, the plan of the tensors that follow, continues the last one.
  bool ContinuedBy(const Plan& part) const { return !part.segments.empty() && Continues(part.segments.front()); }

  /// Adds @p count elements at @p segment, as a new segment or (when @p join) as the
  /// continuation of the last one.
  void Append(const Segment& segment, std::size_t count, bool join) {
    if (!join) {
      offsets.push_back(total);
      segments.push_back(segment);
    }
    total += count;
    bytes += count * ElementSize(segment.dtype);
  }

  /// Appends @p part, the unfinished plan of the tensors that follow; its first segment becomes
  /// part of the last one when @p join. The result is the plan one pass over all would make.
  void Append(const Plan& part, bool join) {
    for (std::size_t s = join ? 1 : 0; s < part.segments.size(); ++s) {
      offsets.push_back(total + part.offsets[s]);
      segments.push_back(part.segments[s]);
    }
    total += part.total;
    bytes += part.bytes;
  }

  /// Elements of segment s (of a finished plan).
  std::size_t Count(std::size_t s) const { return offsets[s + 1] - offsets[s]; }

  void Finish() {
    offsets.push_back(total);
    chunks = (total + kChunkElements - 1) / kChunkElements;
  }

  /// Calls fn(segment, begin, end) for each piece of chunk c, in order.
  template <typename Fn>
  void ForEachPiece(std::size_t chunk, Fn&& fn) const {
    const std::size_t begin = chunk * kChunkElements;
    const std::size_t end = std::min(total, begin + kChunkElements);
    auto it = std::upper_bound(offsets.begin(), offsets.end(), begin);
    std::size_t s = static_cast<std::size_t>(it - offsets.begin()) - 1;
    for (std::size_t pos = begin; pos < end; ++s) {
      const std::size_t seg_end = std::min(end, offsets[s + 1]);
      if (seg_end > pos) {
        fn(s, pos - offsets[s], seg_end - offsets[s]);
      }
      pos = std::max(pos, seg_end);
    }
  }
};

/// The plans of a cast: a source and a destination plan cut alike (segment s of one matches
/// segment s of the other).
using PairPlans = std::pair<Plan, Plan>;

}  // namespace mlframework::backends::cpu
