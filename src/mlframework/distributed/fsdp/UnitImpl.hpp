#pragma once
// Private: the state of one sharding unit, shared by FSDP (which creates units) and
// FSDPShardingUnit (which runs their collectives).

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/distributed/CollectiveRequest.hpp>
#include <mlframework/distributed/Float8BlockReduce.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDPConfig.hpp>
#include <mlframework/distributed/fsdp/FSDPShardingUnit.hpp>
#include <mlframework/distributed/fsdp/UnitPrecision.hpp>

#include "mlframework/distributed/fsdp/BufferPool.hpp"
#include "mlframework/distributed/fsdp/Float8Shard.hpp"

namespace mlframework::distributed::fsdp {

// A gather started by GatherAsync() (or by Gather(), which finishes it at once).
struct PendingGather {
  bool active = false;
  TensorPtr flat;                // the buffer being gathered into
  CollectiveRequestPtr request;  // null once complete; last, so it completes before `flat` goes
};

// A reduction started by ReduceGradientsAsync() (or ReduceGradients()): what FinishReduce()
// needs after the collective. The buffers stay referenced until then.
struct PendingReduce {
  bool active = false;           // started and not finished
  bool communicated = false;     // false: a micro-batch without sync, summed locally already
  bool copy_back = false;        // NoShard in a 16-bit dtype: the all-reduced flat buffer -> target
  bool across_replicas = false;  // sharded: HybridShard's replicate group all-reduces the result
  float scale = 1.0f;            // FP32 sums are averaged after the reduction
  TensorPtr target;              // this rank's FP32 result
  TensorPtr flat;                // the reduced flat buffer (or the framework's own gradient)
  std::vector<TensorPtr> sources;
  detail::PooledBuffer scratch;      // pooled target when adding to an existing gradient
  detail::PooledBuffer flat_buffer;  // pool memory behind `flat`
  detail::PooledBuffer reduced;      // 16-bit reduce-scatter result
  CollectiveRequestPtr request;      // last, so it completes before the buffers above go
};

struct FSDPShardingUnit::Impl {
  IProcessGroup* group = nullptr;            // the whole group: agreement checks, averaging
  IProcessGroup* shard_group = nullptr;      // gathers and reduce-scatters (`group` unless HybridShard)
  IProcessGroup* replicate_group = nullptr;  // HybridShard: all-reduces the gradient shard; else null
  const FSDPConfig* config = nullptr;        // the owning FSDP's (ParamDType may change)
  UnitPrecision precision;                   // this unit's own dtypes, where set
  const bool* requires_sync = nullptr;       // the owning FSDP's gradient-sync switch
  std::string name;
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<std::size_t> offsets;
  std::size_t numel = 0;
  std::size_t padded = 0;
  std::size_t shard_size = 0;
  std::size_t shard_offset = 0;

  detail::BufferPool* pool = nullptr;            // the owning FSDP's caching allocator
  const detail::Placement* placement = nullptr;  // the owning FSDP's device and backend

  TensorPtr shard;     // master shard in MasterDType() (the whole buffer under NoShard)
  TensorPtr gathered;  // flat gathered buffer while gathered
  GradientMap views;   // per-parameter views of `gathered`
  bool is_gathered = false;
  detail::PooledBuffer gathered_storage;  // pool memory behind `gathered` until Release()
  detail::PooledBuffer kept;              // ShardGradOp / NoShard: gathered buffer kept between steps
  TensorPtr local_gradient;               // FP32 gradient shard
  TensorPtr spare_gradient;               // last step's FP32 shard, reused by the next ReduceGradients()
  TensorPtr zero_padding;                 // PaddedSize() - NumElements() FP32 zeros for buffers off the host
  // Full FP32 gradients summed locally over micro-batches without gradient sync (pool memory,
  // padding zero), reduce-scattered once by the next ReduceGradients() with sync; never used
  // under ShardedAccumulation(), which reduces each micro-batch into `local_gradient`.
  detail::PooledBuffer accumulated;
  detail::Float8Shard fp8;  // FP8 parameter dtype: scales and the quantized shard (FSDPShardingUnit.cpp)
  // Collectives of GatherAsync() / ReduceGradientsAsync() not waited for yet; last, so that a
  // unit destroyed with one in flight completes it before its buffers go.
  PendingReduce reduce;
  PendingGather gather;

  // The dtypes this unit gathers and reduces in: its own, else the FSDP's current ones.
  DataType ParamDType() const noexcept { return precision.ParamDType.value_or(config->ParamDType); }
  DataType ReduceDType() const noexcept { return precision.ReduceDType.value_or(config->ReduceDType); }
  GradientWire Wire() const noexcept { return precision.Wire.value_or(config->Wire); }
  bool ShardedAccumulation() const noexcept {
    return precision.ShardedAccumulation.value_or(config->ShardedAccumulation);
  }
  DataType MasterDType() const noexcept { return precision.MasterDType.value_or(config->MasterDType); }

  // Lays the unit out over the shard group (padded size, this rank's shard) and allocates its
  // master shard (MasterDType()), filled from @p sources (the parameters in layout order; rank 0's values
  // under SyncModuleStates), and its FP32 gradient shard. The layout fields above are set.
  void PlaceShard(const std::vector<TensorPtr>& sources);
  // Views of @p flat with the parameters' shapes, by name.
  GradientMap ViewsOf(const TensorPtr& flat) const;
  // The same views in layout order.
  std::vector<TensorPtr> ParameterViews(const TensorPtr& flat) const;
  // Zeroes the padding of the flat unit buffer @p flat.
  void ZeroPadding(const TensorPtr& flat) const;
  // HybridShard: sums the shard group's @p reduced shard over the replicas (the ranks holding
  // the same shard), so it becomes the sum over every rank, through the unit's wire; nothing
  // otherwise.
  void ReduceAcrossReplicas(ITensor& reduced) const {
    if (replicate_group == nullptr || replicate_group->WorldSize() == 1) return;
    if (Wire() == GradientWire::Float8Blocks) {
      Float8BlockAllReduce(*replicate_group, reduced);
    } else {
      replicate_group->AllReduce(reduced, ReduceOp::Sum);
    }
  }
  // Adds a micro-batch's full gradients to `accumulated`.
  void AccumulateLocally(const std::vector<TensorPtr>& gradients);
  // Gather() and ReduceGradients() in two halves around their collective (@p async: started
  // without waiting, finished by WaitGather() / WaitReduce()); @p call names the entry point.
  void StartGather(const char* call, bool async);
  void FinishGather();
  void StartReduce(const char* call, const GradientMap& gradients, bool async);
  void FinishReduce();
  // FP8 parameter dtype (FSDPShardingUnit.cpp): quantizes the shard when the masters changed and
  // starts the all-gather of its bytes into @p buffer (NoShard: quantizes into it, no collective).
  CollectiveRequestPtr GatherFloat8(const TensorPtr& buffer, bool async);
  void PrepareFloat8(DataType dtype);
  void QuantizeFloat8(std::span<const TensorPtr> dst, bool agree);
  // The kept buffer and the FP8 shard no longer match the masters (after an optimizer step or a
  // state load): the buffer's memory goes back to the pool (unless the unit is gathered from it
  // right now) and the next FP8 gather quantizes again.
  void Invalidate() noexcept {
    pool->Return(kept);
    fp8.current = false;
  }
};

}  // namespace mlframework::distributed::fsdp
