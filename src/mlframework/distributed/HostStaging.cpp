#include "mlframework/distributed/HostStaging.hpp"

#include <cstddef>
#include <span>
#include <string>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>

namespace mlframework::distributed::detail {

HostRead::HostRead(const ITensor& tensor) {
  if (const std::span<const std::byte> bytes = tensor.HostBytes(); !bytes.empty()) {
    data_ = bytes.data();
    return;
  }
  staged_ = FromVector(tensor.ToFloatVector(), tensor.GetShape(), tensor.GetDataType());
  data_ = staged_->MutableHostBytes().data();  // core's CPU tensors lie in host memory
}

HostWrite::HostWrite(ITensor& tensor, bool keep_contents) : tensor_(tensor) {
  if (const std::span<std::byte> bytes = tensor.MutableHostBytes(); !bytes.empty()) {
    data_ = bytes.data();
    return;
  }
  staged_ = keep_contents ? FromVector(tensor.ToFloatVector(), tensor.GetShape(), tensor.GetDataType())
                          : Zeros(tensor.GetShape(), tensor.GetDataType());
  data_ = staged_->MutableHostBytes().data();  // core's CPU tensors lie in host memory
}

void HostWrite::Commit() {
  // 16-bit values widen to float exactly, so the round trip through floats is lossless.
  if (staged_) tensor_.CopyFromFloats(staged_->ToFloatVector());
}

void CheckCollectiveDType(std::string_view call, const ITensor& tensor) {
  if (IsFloat8(tensor.GetDataType())) {
    throw ArgumentError("tensor", std::string(call) + ": dtype " + std::string(ToString(tensor.GetDataType())) +
                                      " is not supported by the collectives (Float32, Float16, BFloat16); "
                                      "cast FP8 tensors before a collective");
  }
}

void CheckSameDType(std::string_view call, const ITensor& input, const ITensor& output) {
  CheckCollectiveDType(call, input);
  if (input.GetDataType() != output.GetDataType()) {
    throw ArgumentError("output", std::string(call) + ": output dtype " + std::string(ToString(output.GetDataType())) +
                                      " differs from input dtype " + std::string(ToString(input.GetDataType())));
  }
}

void CheckGatherSizes(const ITensor& input, const ITensor& output, int world_size) {
  // An all-gather only moves bytes: FP8 travels as one byte per element (FSDP's FP8 gathers).
  if (input.GetDataType() != output.GetDataType()) {
    throw ArgumentError("output", "AllGather: output dtype " + std::string(ToString(output.GetDataType())) +
                                      " differs from input dtype " + std::string(ToString(input.GetDataType())));
  }
  if (output.Size() != input.Size() * static_cast<std::size_t>(world_size)) {
    throw ArgumentError("output", "AllGather: output has " + std::to_string(output.Size()) +
                                      " elements, expected input size " + std::to_string(input.Size()) +
                                      " x world size " + std::to_string(world_size));
  }
}

void CheckScatterSizes(const ITensor& input, const ITensor& output, int world_size) {
  CheckSameDType("ReduceScatter", input, output);
  if (input.Size() != output.Size() * static_cast<std::size_t>(world_size)) {
    throw ArgumentError("input", "ReduceScatter: input has " + std::to_string(input.Size()) +
                                     " elements, expected output size " + std::to_string(output.Size()) +
                                     " x world size " + std::to_string(world_size));
  }
}

void CheckAllToAllSizes(const ITensor& input, const ITensor& output, int world_size) {
  // Like an all-gather, an all-to-all only moves bytes: every dtype is taken.
  if (input.GetDataType() != output.GetDataType()) {
    throw ArgumentError("output", "AllToAll: output dtype " + std::string(ToString(output.GetDataType())) +
                                      " differs from input dtype " + std::string(ToString(input.GetDataType())));
  }
  if (output.Size() != input.Size()) {
    throw ArgumentError("output", "AllToAll: output has " + std::to_string(output.Size()) + " elements, the input " +
                                      std::to_string(input.Size()));
  }
  if (input.Size() % static_cast<std::size_t>(world_size) != 0) {
    throw ArgumentError("input", "AllToAll: input has " + std::to_string(input.Size()) +
                                     " elements, not a multiple of the world size " + std::to_string(world_size));
  }
}

void CheckRoot(int root, int world_size) {
  if (root < 0 || root >= world_size) {
    throw ArgumentError(
        "root", "Broadcast: root " + std::to_string(root) + " is outside [0, " + std::to_string(world_size) + ")");
  }
}

void CheckOp(ReduceOp op) {
  if (op != ReduceOp::Sum && op != ReduceOp::Max) {
    throw ArgumentError("op", "unknown ReduceOp " + std::to_string(static_cast<int>(op)));
  }
}

void CheckSplitColor(int color) {
  if (color < 0) {
    throw ArgumentError("color", "Split: color " + std::to_string(color) +
                                     " is negative; every rank must pass a color >= 0 to land in a group");
  }
}

}  // namespace mlframework::distributed::detail
