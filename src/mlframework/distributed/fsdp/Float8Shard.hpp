#pragma once
// Private: what a sharding unit keeps to gather in FP8 (torchao's float8 all-gather under
// FSDP2): the FP8 copy of its master shard, quantized with per-parameter tensorwise scales
// from an amax agreed over the shard group, kept until the masters change.

#include <cstddef>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlframework::distributed::fsdp::detail {

struct Float8Shard {
  // FP32 scale state of the unit's N parameters on the buffer device, one row of N each, in the
  // layout core's fused scale update reads (Float8ScaleUpdate.hpp with a history of one row):
  // agreed amax, scale, scale_inv, fp8_max, scratch.
  TensorPtr state;
  TensorPtr amax;              // row 0
  TensorPtr scale;             // row 1
  TensorPtr scale_inv;         // row 2
  GradientMap scale_inverses;  // one-element views of row 2, by parameter name
  // FullShard / ShardGradOp / HybridShard: this rank's shard in FP8 (ShardSize() bytes; the
  // padding stays as allocated: zero), what every gather of the unit sends.
  TensorPtr shard;
  std::vector<TensorPtr> master_slices;  // each parameter's part of the FP32 master shard (NoShard: all of it)
  std::vector<TensorPtr> fp8_slices;     // the same parts of `shard`
  DataType dtype = DataType::Float32;    // the FP8 type `state` and `shard` were made for
  bool current = false;                  // `shard` holds the masters' current values
};

}  // namespace mlframework::distributed::fsdp::detail
