// A sharding unit: its flat layout and FP32 master shard, the gathers of its parameters (FP8
// gathers too: torchao's float8 all-gather under FSDP2, per-parameter tensorwise current scaling
// of the master shard with an amax agreed over the shard group, the FP8 shard kept until the
// masters change) and the reductions of its gradients, blocking or started and waited for.
#include <mlframework/distributed/fsdp/FSDPShardingUnit.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/Float8ScaleUpdate.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/distributed/AbortGuard.hpp>
#include <mlframework/fp8/Format.hpp>

#include "mlframework/distributed/Agreement.hpp"
#include "mlframework/distributed/fsdp/UnitImpl.hpp"

namespace mlframework::distributed::fsdp {

namespace {
// Rows of the state tensor with a history of one row (Float8ScaleUpdate.hpp).
constexpr std::size_t kAmaxRow = 0;
constexpr std::size_t kScaleRow = 1;
constexpr std::size_t kScaleInvRow = 2;
constexpr std::size_t kMaxRow = 3;
}  // namespace

std::vector<TensorPtr> FSDPShardingUnit::Impl::ParameterViews(const TensorPtr& flat) const {
  std::vector<TensorPtr> result;
  result.reserve(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) result.push_back(placement->View(flat, offsets[i], shapes[i]));
  return result;
}

GradientMap FSDPShardingUnit::Impl::ViewsOf(const TensorPtr& flat) const {
  GradientMap result;
  for (std::size_t i = 0; i < names.size(); ++i) result.emplace(names[i], placement->View(flat, offsets[i], shapes[i]));
  return result;
}

void FSDPShardingUnit::Impl::PlaceShard(const std::vector<TensorPtr>& sources) {
  const bool sharded = config->Strategy != ShardingStrategy::NoShard;
  const auto world_size = static_cast<std::size_t>(shard_group->WorldSize());
  // Shards of whole multiples of ShardAlignment (whole state blocks at every world size).
  const std::size_t quantum = world_size * config->ShardAlignment;
  padded = sharded ? (numel + quantum - 1) / quantum * quantum : numel;
  shard_size = sharded ? padded / world_size : numel;
  shard_offset = sharded ? shard_size * static_cast<std::size_t>(shard_group->Rank()) : 0;

  const bool all_held = std::all_of(sources.begin(), sources.end(), [&](const TensorPtr& t) {
    return placement->Holds(*t);  // views of the parameters can be taken
  });
  if (sharded && !config->SyncModuleStates && all_held) {
    // Only this rank's part is needed: copy each parameter's overlap with the shard straight
    // into it (one fused cast). No transient unit-sized buffer, which between long-lived
    // shards would leave the allocator's heap full of holes and the resident memory above the
    // ZeRO-3 figure (16 B x parameters / ranks). The padding stays as allocated: zero.
    shard = placement->Allocate(shard_size, MasterDType());
    std::vector<TensorPtr> from;
    std::vector<TensorPtr> to;
    for (std::size_t i = 0; i < sources.size(); ++i) {
      const std::size_t begin = std::max(shard_offset, offsets[i]);
      const std::size_t end = std::min(shard_offset + shard_size, offsets[i] + sources[i]->Size());
      if (begin >= end) continue;
      from.push_back(placement->View(sources[i], begin - offsets[i], {end - begin}));
      to.push_back(placement->View(shard, begin - shard_offset, {end - begin}));
    }
    CopyInto(from, to);
  } else {
    // The general path: flatten the whole unit into FP32 (one fused cast; needed to broadcast
    // rank 0's values, or when a parameter is not a tensor of the unit's backend), optionally
    // take rank 0's values, keep this rank's part (the whole flat buffer when not sharded).
    // The shard is allocated before the transient flat buffer, so the shards of many units lie
    // together and the freed flat buffers leave fewer holes between them.
    const bool in_place = !sharded && MasterDType() == DataType::Float32;  // the flat buffer is the shard
    if (!in_place) shard = placement->Allocate(shard_size, MasterDType());
    TensorPtr flat = placement->Allocate(padded, DataType::Float32);
    CopyInto(sources, ParameterViews(flat));
    if (config->SyncModuleStates) group->Broadcast(*flat, 0);
    if (in_place) {
      shard = std::move(flat);
    } else {
      const TensorPtr own_part = placement->View(flat, shard_offset, {shard_size});
      CopyInto(std::span<const TensorPtr>(&own_part, 1), std::span<const TensorPtr>(&shard, 1));
    }
  }
  // The FP32 gradient shard too is allocated now, next to the parameter shard, as DeepSpeed's
  // contiguous gradient partitions are: allocated at the first backward, between the
  // framework's transient gradients, the shards would leave the heap full of holes (resident
  // memory up to 1.2x the ZeRO-3 figure). It is memory the first step needs anyway.
  spare_gradient = placement->Allocate(shard_size, DataType::Float32);
  // Zeros for the padding of the flat gradient buffer (fewer elements than the world size),
  // copied there when the host cannot address the unit buffers; host buffers are cleared in place.
  if (padded > numel && spare_gradient->HostBytes().empty()) {
    zero_padding = placement->Allocate(padded - numel, DataType::Float32);
  }
}

FSDPShardingUnit::FSDPShardingUnit(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FSDPShardingUnit::~FSDPShardingUnit() = default;

void FSDPShardingUnit::LoadShard(std::span<const float> values) {
  impl_->shard->CopyFromFloats(values);
  Invalidate();
}

void FSDPShardingUnit::Invalidate() noexcept { impl_->Invalidate(); }

void FSDPShardingUnit::AppendFullParameters(GradientMap& result) const {
  const Impl& s = *impl_;
  TensorPtr flat = s.shard;
  if (s.config->Strategy != ShardingStrategy::NoShard) {
    flat = s.placement->Allocate(s.padded, s.shard->GetDataType());
    s.shard_group->AllGather(*s.shard, *flat);
  }
  if (flat->GetDataType() != DataType::Float32) {
    // A BF16 master shard: the full parameters are handed out widened (exactly) to FP32.
    TensorPtr wide = s.placement->Allocate(s.padded, DataType::Float32);
    CopyInto(std::span<const TensorPtr>(&flat, 1), std::span<const TensorPtr>(&wide, 1));
    flat = std::move(wide);
  }
  for (const auto& [name, view] : s.ViewsOf(flat)) result.emplace(s.name + "." + name, view->Clone());
}

const std::string& FSDPShardingUnit::Name() const noexcept { return impl_->name; }
const std::vector<std::string>& FSDPShardingUnit::ParameterNames() const noexcept { return impl_->names; }

const Shape& FSDPShardingUnit::ParameterShape(const std::string& name) const {
  const auto it = std::find(impl_->names.begin(), impl_->names.end(), name);
  if (it == impl_->names.end()) {
    throw ArgumentError("name", "unit '" + impl_->name + "' has no parameter '" + name + "'");
  }
  return impl_->shapes[static_cast<std::size_t>(it - impl_->names.begin())];
}

std::size_t FSDPShardingUnit::NumElements() const noexcept { return impl_->numel; }
std::size_t FSDPShardingUnit::PaddedSize() const noexcept { return impl_->padded; }
std::size_t FSDPShardingUnit::ShardSize() const noexcept { return impl_->shard_size; }
std::size_t FSDPShardingUnit::ShardOffset() const noexcept { return impl_->shard_offset; }
TensorPtr FSDPShardingUnit::LocalShard() const noexcept { return impl_->shard; }
DataType FSDPShardingUnit::MasterDType() const noexcept { return impl_->MasterDType(); }
bool FSDPShardingUnit::HasUnsyncedGradients() const noexcept { return impl_->accumulated.tensor != nullptr; }
const UnitPrecision& FSDPShardingUnit::Precision() const noexcept { return impl_->precision; }
DataType FSDPShardingUnit::ParamDType() const noexcept { return impl_->ParamDType(); }
DataType FSDPShardingUnit::ReduceDType() const noexcept { return impl_->ReduceDType(); }
GradientWire FSDPShardingUnit::Wire() const noexcept { return impl_->Wire(); }
bool FSDPShardingUnit::ShardedAccumulation() const noexcept { return impl_->ShardedAccumulation(); }
bool FSDPShardingUnit::IsGathered() const noexcept { return impl_->is_gathered; }
TensorPtr FSDPShardingUnit::GatheredParameter() const noexcept { return impl_->gathered; }
TensorPtr FSDPShardingUnit::LocalGradient() const noexcept { return impl_->local_gradient; }

void FSDPShardingUnit::Gather() {
  impl_->StartGather("Gather", false);
  impl_->FinishGather();
}

// Gather() up to its all-gather, which @p async starts without waiting (GatherAsync()).
void FSDPShardingUnit::Impl::StartGather(const char* call, bool async) {
  Impl& s = *this;
  // The dtype rides in the same all-reduce (MAX of d and of -d): a rank whose FSDP::SetParamDType()
  // differs would gather words of another width than the others.
  const DataType mine = s.ParamDType();
  std::array<double, 2> dtypes{static_cast<double>(mine), -static_cast<double>(mine)};
  distributed::detail::AgreeOn(
      *s.group, std::string(call) + " of unit '" + s.name + "'",
      [&] {
        if (s.is_gathered || s.gather.active) {
          throw InvalidOperationError(
              "unit '" + s.name + "' is already " +
              (s.is_gathered ? "gathered: call Release()" : "being gathered: call WaitGather()") +
              " before gathering it again");
        }
      },
      dtypes);
  if (dtypes[0] != -dtypes[1]) {
    throw ArgumentError("ParamDType", std::string(call) + " of unit '" + s.name +
                                          "': ranks disagree on the parameter dtype (this rank " +
                                          std::string(ToString(mine)) + "; the ranks use " +
                                          std::string(ToString(static_cast<DataType>(-dtypes[1]))) + " and " +
                                          std::string(ToString(static_cast<DataType>(dtypes[0]))) +
                                          "); call FSDP::SetParamDType() with the same dtype on every rank");
  }
  // Past the agreed check every rank enters the all-gather: a failure on one rank from here
  // on (allocation, MPI) must end the job rather than leave the others waiting.
  AbortGuard guard(*s.group, "FSDP " + std::string(call) + " of unit '" + s.name + "'");
  const DataType dtype = s.ParamDType();
  const ShardingStrategy strategy = s.config->Strategy;
  TensorPtr flat;
  if (s.kept.tensor && s.kept.tensor->GetDataType() == dtype) {
    flat = s.kept.tensor;  // ShardGradOp / NoShard: still current since the last step
  } else if (strategy == ShardingStrategy::NoShard && dtype == s.shard->GetDataType()) {
    flat = s.shard;  // every rank holds the whole unit in this dtype already: no copy at all
    s.pool->Return(s.kept);
    s.kept.tensor = flat;
  } else {
    // The buffer comes from the pool (no allocation, no page faults once warm) and every
    // element is written below, so its old contents never show.
    detail::PooledBuffer buffer = s.pool->Acquire(dtype, s.padded);
    if (IsFloat8(dtype)) {
      // FP8: the shard quantized with agreed per-parameter scales, kept until the masters change.
      s.gather.request = s.GatherFloat8(buffer.tensor, async);
    } else if (strategy == ShardingStrategy::NoShard) {
      // Every rank holds the whole unit: no communication, one fused cast.
      CopyInto(std::span<const TensorPtr>(&s.shard, 1), std::span<const TensorPtr>(&buffer.tensor, 1));
    } else if (dtype == s.shard->GetDataType()) {
      // Nothing to cast: the all-gather reads the shard itself, like the raw collective.
      s.gather.request = async ? s.shard_group->AllGatherAsync(*s.shard, *buffer.tensor)
                               : (s.shard_group->AllGather(*s.shard, *buffer.tensor), nullptr);
    } else {
      // Cast the FP32 shard straight into this rank's slot (so the all-gather moves 16-bit
      // words) and gather in place around it: no staging buffer, no extra copy.
      // Asynchronous: the cast is the gather's first step, which the engine may run on its
      // progress thread, during the caller's compute (the shard stays unchanged meanwhile:
      // Step() and the state loads refuse while a gather is in flight).
      const TensorPtr slot = s.placement->View(buffer.tensor, s.shard_offset, {s.shard_size});
      auto cast = [shard = s.shard, slot] {
        CopyInto(std::span<const TensorPtr>(&shard, 1), std::span<const TensorPtr>(&slot, 1));
      };
      if (async) {
        s.gather.request = s.shard_group->AllGatherAsyncAfter(cast, *slot, *buffer.tensor);
      } else {
        cast();
        s.shard_group->AllGather(*slot, *buffer.tensor);
      }
    }
    flat = buffer.tensor;
    if (strategy == ShardingStrategy::FullShard || strategy == ShardingStrategy::HybridShard) {
      s.gathered_storage = std::move(buffer);
    } else {
      s.pool->Return(s.kept);  // a kept buffer of the previous dtype is of no use any more
      s.kept = std::move(buffer);
    }
  }
  s.gather.flat = std::move(flat);
  s.gather.active = true;
}

// The rest of Gather(): waits for the all-gather, if one is running, and hands out the views.
void FSDPShardingUnit::Impl::FinishGather() {
  if (gather.request) {
    AbortGuard guard(*group, "FSDP WaitGather of unit '" + name + "'");
    try {
      gather.request->Wait();
    } catch (...) {
      // One rank (no peer to end): the unit is left as never gathered.
      gather = {};
      pool->Return(gathered_storage);
      throw;
    }
  }
  views = ViewsOf(gather.flat);
  gathered = std::move(gather.flat);
  gather = {};
  is_gathered = true;
}

void FSDPShardingUnit::Release() {
  Impl& s = *impl_;
  if (!s.is_gathered) {
    throw InvalidOperationError("unit '" + s.name +
                                (s.gather.active ? "' has a gather in flight: call WaitGather() "
                                                   "before releasing it"
                                                 : "' is not gathered: nothing to release"));
  }
  s.views.clear();
  s.gathered.reset();
  s.is_gathered = false;
  // FullShard: the memory goes back to the pool for the next unit's Gather(), unless the
  // framework still holds a view of it (then it is freed when the framework lets go).
  s.pool->Return(s.gathered_storage);
}

void FSDPShardingUnit::SetGatheredParameter(TensorPtr gathered) {
  Impl& s = *impl_;
  if (!s.is_gathered) {
    throw InvalidOperationError("unit '" + s.name + "' is not gathered: gather it before replacing its parameter");
  }
  if (!gathered) throw ArgumentNullError("gathered");
  if (!s.placement->Holds(*gathered) || gathered->Size() != s.padded) {
    const TensorBackend* backend = gathered->Backend();
    throw ArgumentError("gathered", "must be a tensor of " + std::to_string(s.padded) + " elements on " +
                                        s.placement->device.ToString() + " (the parameters' device and backend), got " +
                                        std::to_string(gathered->Size()) + " elements on " +
                                        gathered->GetDevice().ToString() + " (backend '" +
                                        std::string(backend != nullptr ? backend->Name() : "none") + "')");
  }
  GradientMap views = s.ViewsOf(gathered);
  s.views = std::move(views);
  s.gathered = std::move(gathered);
}

const GradientMap& FSDPShardingUnit::Parameters() const {
  if (!impl_->is_gathered) {
    throw InvalidOperationError("unit '" + impl_->name +
                                "' is not gathered: call Gather() before using its parameters");
  }
  return impl_->views;
}

// The padding of a flat unit buffer is reduced too and lands in the last rank's shard: it must
// be zero, whatever the pooled buffer held before.
void FSDPShardingUnit::Impl::ZeroPadding(const TensorPtr& flat) const {
  if (padded == numel) return;
  const std::size_t element = ElementSize(flat->GetDataType());
  if (const std::span<std::byte> bytes = flat->MutableHostBytes(); !bytes.empty()) {
    std::memset(bytes.data() + numel * element, 0, (padded - numel) * element);
  } else {
    // On a device: one queued copy of the unit's zeros (fewer than world-size elements).
    const TensorPtr padding = placement->View(flat, numel, {padded - numel});
    CopyInto(std::span<const TensorPtr>(&zero_padding, 1), std::span<const TensorPtr>(&padding, 1));
  }
}

// The first micro-batch is copied into a pooled buffer, later ones added: one fused pass each.
void FSDPShardingUnit::Impl::AccumulateLocally(const std::vector<TensorPtr>& gradients) {
  if (accumulated.tensor) {
    AddInto(gradients, ParameterViews(accumulated.tensor));
    return;
  }
  detail::PooledBuffer buffer = pool->Acquire(DataType::Float32, padded);
  CopyInto(gradients, ParameterViews(buffer.tensor));
  ZeroPadding(buffer.tensor);
  accumulated = std::move(buffer);
}

void FSDPShardingUnit::ReduceGradients(const GradientMap& gradients) {
  impl_->StartReduce("ReduceGradients", gradients, false);
  impl_->FinishReduce();
}

// ReduceGradients() up to its collective, which @p async starts without waiting
// (ReduceGradientsAsync()); what follows the collective is left to FinishReduce() in `reduce`.
void FSDPShardingUnit::Impl::StartReduce(const char* call, const GradientMap& gradients, bool async) {
  Impl& s = *this;
  std::vector<TensorPtr> sources;
  const auto check = [&] {
    if (s.reduce.active) {
      throw InvalidOperationError("unit '" + s.name +
                                  "' has a gradient reduction in flight: call WaitReduce() "
                                  "before reducing its gradients again");
    }
    if (!s.is_gathered) {
      throw InvalidOperationError("unit '" + s.name +
                                  "' is not gathered: reduce-scatter before gather; gather the unit for its "
                                  "backward pass, then reduce its gradients, then release it");
    }
    for (const auto& [param_name, tensor] : gradients) {
      if (std::find(s.names.begin(), s.names.end(), param_name) == s.names.end()) {
        throw ArgumentError("gradients", "unit '" + s.name + "' has no parameter '" + param_name + "'");
      }
    }
    for (std::size_t i = 0; i < s.names.size(); ++i) {
      const auto it = gradients.find(s.names[i]);
      if (it == gradients.end()) {
        throw ArgumentError("gradients", "missing the gradient of '" + s.names[i] + "' of unit '" + s.name + "'");
      }
      if (!it->second) throw ArgumentNullError("gradients[" + s.names[i] + "]");
      if (it->second->GetShape() != s.shapes[i]) {
        throw ArgumentError("gradients", "gradient of '" + s.names[i] + "' has shape " +
                                             mlframework::ToString(it->second->GetShape()) + ", the parameter has " +
                                             mlframework::ToString(s.shapes[i]));
      }
      sources.push_back(it->second);
    }
  };
  const DataType reduce_dtype = s.ReduceDType();
  if (!*s.requires_sync && !s.ShardedAccumulation()) {
    // A micro-batch without gradient sync: no communication at all, so the checks stay local
    // (every rank runs the same schedule), and the gradients are summed in FP32 in place.
    // Under ShardedAccumulation() it is reduced as with sync instead, and FinishReduce() adds
    // the result into the FP32 gradient shard.
    check();
    s.AccumulateLocally(sources);
    s.reduce.active = true;  // nothing in flight: FinishReduce() only clears it
    return;
  }
  distributed::detail::AgreeOn(*s.group, std::string(call) + " of unit '" + s.name + "'", check);
  AbortGuard guard(*s.group, "FSDP " + std::string(call) + " of unit '" + s.name + "'");
  if (s.accumulated.tensor) {
    // The last micro-batch of an accumulation: add it to the local sum, which is reduced once,
    // as one flat FP32 parameter (its padding is zero).
    s.AccumulateLocally(sources);
    sources.assign(1, s.accumulated.tensor);
  }
  const int world = s.group->WorldSize();
  const bool no_shard = s.config->Strategy == ShardingStrategy::NoShard;
  // Where this rank's FP32 result goes: the FP32 shard of the last step when there is one (the
  // optimizer may still hold it, so a fresh buffer per step would double the gradient memory),
  // a new one on the first step, a pooled scratch shard when accumulating into an existing one.
  TensorPtr target;
  detail::PooledBuffer scratch;
  if (s.local_gradient) {
    scratch = s.pool->Acquire(DataType::Float32, s.shard_size);
    target = scratch.tensor;
  } else if (s.spare_gradient) {
    target = std::move(s.spare_gradient);
  } else {
    target = s.placement->Allocate(s.shard_size, DataType::Float32);
  }
  s.spare_gradient.reset();
  // FP32 sums are averaged after the reduction, on the shard (exact for power-of-two world
  // sizes, and 1/world of the work); 16-bit sums before it, which keeps them away from overflow.
  // The FP8 wire encodes FP32 gradients and sums in FP32, so it takes the FP32 path up to the
  // collective.
  const bool fp8_wire = s.Wire() == GradientWire::Float8Blocks && world > 1;
  const bool fp32_reduce = fp8_wire || reduce_dtype == DataType::Float32;
  const DataType flat_dtype = fp32_reduce ? DataType::Float32 : reduce_dtype;
  const float average = 1.0f / static_cast<float>(world);
  // A unit of one CPU FP32 parameter whose size is a multiple of the world size (the flat
  // parameter layout of PyTorch FSDP) needs no flattening: its gradient is reduce-scattered
  // straight from the framework's tensor, as the raw collective would.
  const bool from_sum = s.accumulated.tensor != nullptr;  // sources: the FP32 sum, padding included
  const bool direct = !no_shard && fp32_reduce &&
                      (from_sum || (sources.size() == 1 && s.padded == s.numel && s.placement->Holds(*sources[0]) &&
                                    sources[0]->GetDataType() == DataType::Float32));
  // Otherwise flatten (and cast to the reduce dtype, and average for 16-bit) in one fused pass
  // straight into a pooled flat buffer (NoShard with FP32: into the target, the whole unit).
  const bool into_target = no_shard && fp32_reduce;
  detail::PooledBuffer flat_buffer;
  TensorPtr flat;
  if (direct) {
    flat = sources[0];
  } else {
    if (!into_target) flat_buffer = s.pool->Acquire(flat_dtype, s.padded);
    flat = into_target ? target : flat_buffer.tensor;
    if (from_sum) {
      // The accumulated sum, padding included: one cast of the whole buffer.
      CopyInto(sources, std::span<const TensorPtr>(&flat, 1), fp32_reduce ? 1.0f : average);
    } else {
      CopyInto(sources, s.ParameterViews(flat), fp32_reduce ? 1.0f : average);
      s.ZeroPadding(flat);
    }
  }
  PendingReduce& p = s.reduce;
  bool averaged = false;  // FP32: averaged by the request itself
  if (fp8_wire) {
    // Encoding, exchange and the decoding sum run here, on the caller's thread, also for
    // ReduceGradientsAsync() (its request is then complete): the wire's work is local but for
    // the exchange. HybridShard's replicas follow in FinishReduce(), as for the other wires.
    if (no_shard) {
      Float8BlockAllReduce(*s.group, *flat);
    } else if (s.replicate_group == nullptr) {
      // The average is the decoding pass's last multiply (the bits of FinishReduce()'s).
      Float8BlockReduceScatter(*s.shard_group, *flat, *target, average);
      averaged = true;
    } else {
      Float8BlockReduceScatter(*s.shard_group, *flat, *target);  // averaged after the replicas' sum
    }
  } else if (no_shard) {
    p.request =
        async ? s.group->AllReduceAsync(*flat, ReduceOp::Sum) : (s.group->AllReduce(*flat, ReduceOp::Sum), nullptr);
  } else if (fp32_reduce && async && world > 1 && s.replicate_group == nullptr) {
    // The averaging is the reduction's last step, which the engine may run on its progress
    // thread (the same multiply on the same sums as FinishReduce()'s, so the same bits).
    p.request = s.shard_group->ReduceScatterAsyncThen(*flat, *target, ReduceOp::Sum, [target, average] {
      ScaleInPlace(std::span<const TensorPtr>(&target, 1), average);
    });
    averaged = true;
  } else if (fp32_reduce) {
    p.request = async ? s.shard_group->ReduceScatterAsync(*flat, *target, ReduceOp::Sum)
                      : (s.shard_group->ReduceScatter(*flat, *target, ReduceOp::Sum), nullptr);
  } else {
    p.reduced = s.pool->Acquire(reduce_dtype, s.shard_size);
    p.request = async ? s.shard_group->ReduceScatterAsync(*flat, *p.reduced.tensor, ReduceOp::Sum)
                      : (s.shard_group->ReduceScatter(*flat, *p.reduced.tensor, ReduceOp::Sum), nullptr);
  }
  p.active = true;
  p.communicated = true;
  p.copy_back = no_shard && !into_target;
  p.across_replicas = !no_shard;
  p.scale = fp32_reduce && world > 1 && !averaged ? average : 1.0f;
  p.target = std::move(target);
  p.scratch = std::move(scratch);
  p.flat = std::move(flat);
  p.flat_buffer = std::move(flat_buffer);
  p.sources = std::move(sources);
}

// The rest of ReduceGradients(): waits for the collective, if one is running, and lands the
// result in LocalGradient().
void FSDPShardingUnit::Impl::FinishReduce() {
  Impl& s = *this;
  PendingReduce p = std::move(s.reduce);
  s.reduce = {};
  if (!p.communicated) return;  // a micro-batch without gradient sync: summed already
  AbortGuard guard(*s.group, "FSDP WaitReduce of unit '" + s.name + "'");
  if (p.request) p.request->Wait();
  TensorPtr target = std::move(p.target);
  if (p.copy_back) CopyInto(std::span<const TensorPtr>(&p.flat, 1), std::span<const TensorPtr>(&target, 1));
  // HybridShard: the replicas' all-reduce starts once the shard group's reduce-scatter is done,
  // so it runs here (a collective over the replicate group, in the order of the waits); in the
  // reduce dtype, the same bytes as the reduce-scatter's.
  if (p.across_replicas) s.ReduceAcrossReplicas(p.reduced.tensor ? *p.reduced.tensor : *target);
  if (p.reduced.tensor) {
    CopyInto(std::span<const TensorPtr>(&p.reduced.tensor, 1), std::span<const TensorPtr>(&target, 1));
    s.pool->Return(p.reduced);
  }
  if (p.scale != 1.0f) ScaleInPlace(std::span<const TensorPtr>(&target, 1), p.scale);
  p.flat.reset();  // the pool reuses only blocks nobody else references
  p.sources.clear();
  s.pool->Return(p.flat_buffer);
  s.pool->Return(s.accumulated);
  if (!s.local_gradient) {
    // The first reduction of this step, or the shard was dropped (ZeroGrad()) while this one
    // was in flight: a pooled scratch target must not become the gradient, so it is copied.
    if (p.scratch.tensor) {
      s.local_gradient = s.placement->Allocate(s.shard_size, DataType::Float32);
      CopyInto(std::span<const TensorPtr>(&target, 1), std::span<const TensorPtr>(&s.local_gradient, 1));
      target.reset();
      s.pool->Return(p.scratch);
    } else {
      s.local_gradient = std::move(target);
    }
    return;
  }
  // Gradient accumulation over several backward passes before one step: one fused add (a
  // shard set by SetLocalGradient() on another backend goes through the host, as any mixed
  // pair does).
  AddInto(std::span<const TensorPtr>(&target, 1), std::span<const TensorPtr>(&s.local_gradient, 1));
  target.reset();
  s.pool->Return(p.scratch);
}

void FSDPShardingUnit::SetLocalGradient(TensorPtr gradient) {
  if (!gradient) throw ArgumentNullError("gradient");
  if (gradient->Size() != impl_->shard_size) {
    throw ArgumentError("gradient", "must have the shard size " + std::to_string(impl_->shard_size) + " of unit '" +
                                        impl_->name + "', got " + std::to_string(gradient->Size()));
  }
  impl_->local_gradient = std::move(gradient);
}

void FSDPShardingUnit::ZeroGrad() noexcept {
  Impl& s = *impl_;
  s.pool->Return(s.accumulated);
  // Keep an FP32 shard of ours for the next ReduceGradients() to reduce into.
  if (s.local_gradient && s.local_gradient->GetDataType() == DataType::Float32 &&
      s.placement->Holds(*s.local_gradient) && s.local_gradient->Size() == s.shard_size) {
    s.spare_gradient = std::move(s.local_gradient);
  }
  s.local_gradient.reset();
}

// The asynchronous forms of Gather() and ReduceGradients(): the same two halves, with the
// collective started in between and finished by the wait.

void FSDPShardingUnit::GatherAsync() { impl_->StartGather("GatherAsync", true); }

bool FSDPShardingUnit::IsGatherInFlight() const noexcept { return impl_->gather.active; }

void FSDPShardingUnit::WaitGather() {
  if (!impl_->gather.active) {
    throw InvalidOperationError("unit '" + impl_->name + "' has no gather in flight: " +
                                (impl_->is_gathered ? "it was waited for already" : "call GatherAsync() first"));
  }
  impl_->FinishGather();
}

void FSDPShardingUnit::ReduceGradientsAsync(const GradientMap& gradients) {
  impl_->StartReduce("ReduceGradientsAsync", gradients, true);
}

bool FSDPShardingUnit::IsReduceInFlight() const noexcept { return impl_->reduce.active; }

void FSDPShardingUnit::WaitReduce() {
  if (!impl_->reduce.active) {
    throw InvalidOperationError("unit '" + impl_->name +
                                "' has no gradient reduction in flight: call ReduceGradientsAsync() first (each "
                                "reduction is waited for once)");
  }
  impl_->FinishReduce();
}

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
