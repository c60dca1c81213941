#pragma once
// Private: host pointers for collectives. Tensors whose memory the host addresses
// (ITensor::HostBytes()) are used in place; any other tensor (a device tensor, a user tensor
// that keeps its elements elsewhere) is staged through a CPU copy, so every engine accepts
// every ITensor. Also the argument checks every engine shares, so they fail identically.
// Exported (not public API) because the MPI and NCCL engines live in their own libraries.

#include <cstddef>
#include <string_view>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed::detail {

/// Read access to a tensor's elements on the host.
class MLFRAMEWORK_EXPORT HostRead {
 public:
  explicit HostRead(const ITensor& tensor);
  const void* Data() const noexcept { return data_; }

 private:
  TensorPtr staged_;
  const void* data_ = nullptr;
};

/// Write (and optionally read) access on the host; Commit() copies staged elements back.
class MLFRAMEWORK_EXPORT HostWrite {
 public:
  HostWrite(ITensor& tensor, bool keep_contents);
  void* Data() const noexcept { return data_; }
  void Commit();

 private:
  ITensor& tensor_;
  TensorPtr staged_;
  void* data_ = nullptr;
};

/// ArgumentError naming `tensor` for an FP8 dtype: the reductions and Broadcast take FP32, FP16
/// and BF16 (an FP8 reduction has no NCCL or MPI type, and summing FP8 would round at every
/// step). AllGather (CheckGatherSizes) also takes FP8: it moves bytes.
MLFRAMEWORK_EXPORT void CheckCollectiveDType(std::string_view call, const ITensor& tensor);
MLFRAMEWORK_EXPORT void CheckSameDType(std::string_view call, const ITensor& input, const ITensor& output);
MLFRAMEWORK_EXPORT void CheckGatherSizes(const ITensor& input, const ITensor& output, int world_size);
MLFRAMEWORK_EXPORT void CheckScatterSizes(const ITensor& input, const ITensor& output, int world_size);
/// AllToAll's checks: same dtype and size, the size a multiple of @p world_size.
MLFRAMEWORK_EXPORT void CheckAllToAllSizes(const ITensor& input, const ITensor& output, int world_size);
MLFRAMEWORK_EXPORT void CheckRoot(int root, int world_size);
MLFRAMEWORK_EXPORT void CheckOp(ReduceOp op);
/// ArgumentError naming `color` when it is negative (IProcessGroup::Split puts every rank in a group).
MLFRAMEWORK_EXPORT void CheckSplitColor(int color);

}  // namespace mlframework::distributed::detail
