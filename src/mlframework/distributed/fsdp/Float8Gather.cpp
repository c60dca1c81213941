// FP8 gathers of a sharding unit (torchao's float8 all-gather under FSDP2): per-parameter
// tensorwise current scaling of the FP32 master shard with an amax agreed over the shard group,
// the FP8 shard kept until the masters change, its bytes all-gathered as they are.
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/Float8ScaleUpdate.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/distributed/fsdp/FSDPShardingUnit.hpp>
#include <mlframework/fp8/Format.hpp>

#include "mlframework/distributed/fsdp/UnitImpl.hpp"

namespace mlframework::distributed::fsdp {

namespace {
// Rows of the state tensor with a history of one row (Float8ScaleUpdate.hpp).
constexpr std::size_t kAmaxRow = 0;
constexpr std::size_t kScaleRow = 1;
constexpr std::size_t kScaleInvRow = 2;
constexpr std::size_t kMaxRow = 3;
}  // namespace

// (Re)makes the scale state (and, sharded, the FP8 shard) for @p dtype: at the first FP8 gather
// and after a change of the parameter dtype. Host values are written once here, never per step.
void FSDPShardingUnit::Impl::PrepareFloat8(DataType dtype) {
  if (fp8.state && fp8.dtype == dtype) return;
  const std::size_t n = names.size();
  detail::Float8Shard made;
  made.dtype = dtype;
  made.state = placement->Allocate(Float8StateRows(1) * n, DataType::Float32);
  std::vector<float> initial(Float8StateRows(1) * n, 0.0f);
  std::fill_n(initial.begin() + static_cast<std::ptrdiff_t>(kScaleRow * n), 2 * n, 1.0f);  // scale, scale_inv
  std::fill_n(initial.begin() + static_cast<std::ptrdiff_t>(kMaxRow * n), n, fp8::Float8Max(dtype));
  made.state->CopyFromFloats(initial);
  made.amax = placement->View(made.state, kAmaxRow * n, {n});
  made.scale = placement->View(made.state, kScaleRow * n, {n});
  made.scale_inv = placement->View(made.state, kScaleInvRow * n, {n});
  for (std::size_t i = 0; i < n; ++i) {
    made.scale_inverses.emplace(names[i], placement->View(made.state, kScaleInvRow * n + i, {1}));
  }
  const bool no_shard = config->Strategy == ShardingStrategy::NoShard;
  if (!no_shard) made.shard = placement->Allocate(shard_size, dtype);
  // Each parameter's part of this rank's shard (empty when the parameter lies elsewhere), so the
  // amax and the scaled cast run per parameter over the shard in one fused call each.
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t first = std::max(offsets[i], shard_offset);
    const std::size_t last = std::min(offsets[i] + ElementCount(shapes[i]), shard_offset + shard_size);
    const std::size_t start = first < last ? first - shard_offset : 0;
    const std::size_t length = first < last ? last - first : 0;
    if (no_shard) {
      // The whole parameter, in its shape: the cast writes the gathered views themselves.
      made.master_slices.push_back(placement->View(shard, offsets[i], shapes[i]));
    } else {
      made.master_slices.push_back(placement->View(shard, start, {length}));
      made.fp8_slices.push_back(placement->View(made.shard, start, {length}));
    }
  }
  fp8 = std::move(made);
}

// amax per parameter slice -> (sharded) MAX over the shard group -> scale = fp8_max / amax
// (1 when the amax is 0 or not finite) -> the scaled cast of each slice into @p dst. All of it
// queued on the buffer device: under NCCL nothing comes back to the host.
void FSDPShardingUnit::Impl::QuantizeFloat8(std::span<const TensorPtr> dst, bool agree) {
  Amax(fp8.master_slices, fp8.amax);
  // Replicas under HybridShard hold identical masters: the shard group alone covers the unit.
  if (agree && shard_group->WorldSize() > 1) shard_group->AllReduce(*fp8.amax, ReduceOp::Max);
  Float8ScaleUpdate update;
  update.HistoryLength = 1;
  update.Count = names.size();
  update.Length = names.size();
  update.MostRecent = true;
  update.KeepScaleOnBadAmax = false;  // current scaling: scale 1 for an amax of 0 or not finite
  update.RollHistory = false;
  fp8.state->Backend()->UpdateFloat8Scales(*fp8.state, update);
  ScaledCastToFloat8(fp8.master_slices, dst, fp8.scale, nullptr);
}

CollectiveRequestPtr FSDPShardingUnit::Impl::GatherFloat8(const TensorPtr& buffer, bool async) {
  PrepareFloat8(ParamDType());
  if (config->Strategy == ShardingStrategy::NoShard) {
    // Every rank holds the whole unit (equal masters): quantize straight into the buffer, which
    // the unit keeps until the next step, with no communication at all.
    QuantizeFloat8(ParameterViews(buffer), false);
    return nullptr;
  }
  if (!fp8.current) {
    QuantizeFloat8(fp8.fp8_slices, true);
    fp8.current = true;
  }
  if (async) return shard_group->AllGatherAsync(*fp8.shard, *buffer);
  shard_group->AllGather(*fp8.shard, *buffer);
  return nullptr;
}

const GradientMap& FSDPShardingUnit::Float8ScaleInverses() const {
  const Impl& s = *impl_;
  const DataType dtype = s.ParamDType();
  if (!IsFloat8(dtype)) {
    throw InvalidOperationError("unit '" + s.name + "' gathers in " + std::string(ToString(dtype)) +
                                ", not FP8: it has no FP8 scales");
  }
  if (!s.fp8.state || s.fp8.dtype != dtype) {
    throw InvalidOperationError("unit '" + s.name + "' has not been gathered in " + std::string(ToString(dtype)) +
                                " yet: call Gather() first");
  }
  return s.fp8.scale_inverses;
}

}  // namespace mlframework::distributed::fsdp
