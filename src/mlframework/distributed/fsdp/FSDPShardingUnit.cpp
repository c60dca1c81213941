#include <mlframework/distributed/fsdp/FSDPShardingUnit.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/distributed/AbortGuard.hpp>

#include "mlframework/distributed/fsdp/Agreement.hpp"
#include "mlframework/distributed/fsdp/UnitImpl.hpp"

namespace mlframework::distributed::fsdp {

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

FSDPShardingUnit::FSDPShardingUnit(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FSDPShardingUnit::~FSDPShardingUnit() = default;

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
bool FSDPShardingUnit::HasUnsyncedGradients() const noexcept { return impl_->accumulated.tensor != nullptr; }
const UnitPrecision& FSDPShardingUnit::Precision() const noexcept { return impl_->precision; }
DataType FSDPShardingUnit::ParamDType() const noexcept { return impl_->ParamDType(); }
DataType FSDPShardingUnit::ReduceDType() const noexcept { return impl_->ReduceDType(); }
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
  detail::AgreeOn(*s.group, std::string(call) + " of unit '" + s.name + "'", [&] {
    if (s.is_gathered || s.gather.active) {
      throw InvalidOperationError("unit '" + s.name + "' is already " +
                                  (s.is_gathered ? "gathered: call Release()" : "being gathered: call WaitGather()") +
                                  " before gathering it again");
    }
  });
  // Past the agreed check every rank enters the all-gather: a failure on one rank from here
  // on (allocation, MPI) must end the job rather than leave the others waiting.
  AbortGuard guard(*s.group, "FSDP " + std::string(call) + " of unit '" + s.name + "'");
  const DataType dtype = s.ParamDType();
  const ShardingStrategy strategy = s.config->Strategy;
  TensorPtr flat;
  if (s.kept.tensor && s.kept.tensor->GetDataType() == dtype) {
    flat = s.kept.tensor;  // ShardGradOp / NoShard: still current since the last step
  } else if (strategy == ShardingStrategy::NoShard && dtype == DataType::Float32) {
    flat = s.shard;  // every rank holds the whole unit in FP32 already: no copy at all
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
    } else if (dtype == DataType::Float32) {
      // Nothing to cast: the all-gather reads the FP32 shard itself, like the raw collective.
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
  if (!*s.requires_sync) {
    // A micro-batch without gradient sync: no communication at all, so the checks stay local
    // (every rank runs the same schedule), and the gradients are summed in FP32 in place.
    check();
    s.AccumulateLocally(sources);
    s.reduce.active = true;  // nothing in flight: FinishReduce() only clears it
    return;
  }
  detail::AgreeOn(*s.group, std::string(call) + " of unit '" + s.name + "'", check);
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
  const bool fp32_reduce = reduce_dtype == DataType::Float32;
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
    if (!into_target) flat_buffer = s.pool->Acquire(reduce_dtype, s.padded);
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
  if (no_shard) {
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

}  // namespace mlframework::distributed::fsdp
