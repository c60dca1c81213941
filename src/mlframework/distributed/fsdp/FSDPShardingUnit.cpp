#include <mlframework/distributed/fsdp/FSDPShardingUnit.hpp>

#include <algorithm>
#include <utility>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/distributed/AbortGuard.hpp>

#include "mlframework/distributed/fsdp/Agreement.hpp"
#include "mlframework/distributed/fsdp/UnitImpl.hpp"

namespace mlframework::distributed::fsdp {

namespace cpu = backends::cpu;

GradientMap FSDPShardingUnit::Impl::ViewsOf(const TensorPtr& flat) const {
  GradientMap result;
  for (std::size_t i = 0; i < names.size(); ++i) result.emplace(names[i], cpu::View(flat, offsets[i], shapes[i]));
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
bool FSDPShardingUnit::IsGathered() const noexcept { return impl_->is_gathered; }
TensorPtr FSDPShardingUnit::GatheredParameter() const noexcept { return impl_->gathered; }
TensorPtr FSDPShardingUnit::LocalGradient() const noexcept { return impl_->local_gradient; }

void FSDPShardingUnit::Gather() {
  Impl& s = *impl_;
  detail::AgreeOn(*s.group, "Gather of unit '" + s.name + "'", [&] {
    if (s.is_gathered) {
      throw InvalidOperationError("unit '" + s.name +
                                  "' is already gathered: call Release() before gathering it again");
    }
  });
  // Past the agreed check every rank enters the all-gather: a failure on one rank from here
  // on (allocation, MPI) must end the job rather than leave the others waiting.
  AbortGuard guard(*s.group, "FSDP Gather of unit '" + s.name + "'");
  const DataType dtype = s.config->ParamDType;
  const ShardingStrategy strategy = s.config->Strategy;
  TensorPtr flat;
  if (s.kept && s.kept->GetDataType() == dtype) {
    flat = s.kept;  // ShardGradOp / NoShard: still current since the last step
  } else if (strategy == ShardingStrategy::NoShard) {
    // Every rank holds the whole unit: no communication, at most one fused cast.
    flat = dtype == DataType::Float32 ? s.shard : Cast(std::span<const TensorPtr>(&s.shard, 1), dtype)[0];
    s.kept = flat;
  } else {
    // Cast first, so the all-gather moves ParamDType bytes (16-bit for FP16/BF16).
    const TensorPtr send =
        dtype == DataType::Float32 ? s.shard : Cast(std::span<const TensorPtr>(&s.shard, 1), dtype)[0];
    flat = cpu::Empty({s.padded}, dtype);
    s.group->AllGather(*send, *flat);
    if (strategy == ShardingStrategy::ShardGradOp) s.kept = flat;
  }
  s.views = s.ViewsOf(flat);
  s.gathered = std::move(flat);
  s.is_gathered = true;
}

void FSDPShardingUnit::Release() {
  Impl& s = *impl_;
  if (!s.is_gathered) {
    throw InvalidOperationError("unit '" + s.name + "' is not gathered: nothing to release");
  }
  s.views.clear();
  s.gathered.reset();
  s.is_gathered = false;
}

void FSDPShardingUnit::SetGatheredParameter(TensorPtr gathered) {
  Impl& s = *impl_;
  if (!s.is_gathered) {
    throw InvalidOperationError("unit '" + s.name + "' is not gathered: gather it before replacing its parameter");
  }
  if (!gathered) throw ArgumentNullError("gathered");
  if (!cpu::IsCpuTensor(*gathered) || gathered->Size() != s.padded) {
    throw ArgumentError("gathered", "must be a CPU tensor of " + std::to_string(s.padded) + " elements, got " +
                                        std::to_string(gathered->Size()) + " elements on " +
                                        gathered->GetDevice().ToString());
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

void FSDPShardingUnit::ReduceGradients(const GradientMap& gradients) {
  Impl& s = *impl_;
  std::vector<TensorPtr> sources;
  detail::AgreeOn(*s.group, "ReduceGradients of unit '" + s.name + "'", [&] {
    if (!s.is_gathered) {
      throw InvalidOperationError("unit '" + s.name +
                                  "' is not gathered: reduce-scatter before gather; gather the unit for its "
                                  "backward pass, then reduce its gradients, then release it");
    }
    for (const auto& [name, tensor] : gradients) {
      if (std::find(s.names.begin(), s.names.end(), name) == s.names.end()) {
        throw ArgumentError("gradients", "unit '" + s.name + "' has no parameter '" + name + "'");
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
  });
  AbortGuard guard(*s.group, "FSDP ReduceGradients of unit '" + s.name + "'");
  const int world = s.group->WorldSize();
  const DataType reduce_dtype = s.config->ReduceDType;
  // Flatten, average and cast to the reduce dtype in one fused pass (padding stays zero).
  // Dividing before the sum keeps 16-bit reductions away from overflow.
  TensorPtr flat = cpu::Empty({s.padded}, reduce_dtype);
  {
    std::vector<TensorPtr> targets;
    targets.reserve(s.names.size());
    for (std::size_t i = 0; i < s.names.size(); ++i) targets.push_back(cpu::View(flat, s.offsets[i], s.shapes[i]));
    CastInto(sources, targets, 1.0f / static_cast<float>(world));
  }
  // The FP32 shard of the last step is reused (the optimizer may still hold it, so a fresh
  // buffer per step would double the gradient memory).
  TensorPtr target;
  if (!s.local_gradient && s.spare_gradient) target = std::move(s.spare_gradient);
  s.spare_gradient.reset();
  const bool direct = target && reduce_dtype == DataType::Float32;
  TensorPtr reduced;
  if (s.config->Strategy == ShardingStrategy::NoShard) {
    s.group->AllReduce(*flat, ReduceOp::Sum);
    reduced = std::move(flat);
  } else {
    reduced = direct ? target : cpu::Empty({s.shard_size}, reduce_dtype);
    s.group->ReduceScatter(*flat, *reduced, ReduceOp::Sum);
    flat.reset();  // the full gradient buffer is transient
  }
  if (reduced != target && target) {
    CastInto(std::span<const TensorPtr>(&reduced, 1), std::span<const TensorPtr>(&target, 1));
    reduced = target;
  } else if (reduced->GetDataType() != DataType::Float32) {
    reduced = Cast(std::span<const TensorPtr>(&reduced, 1), DataType::Float32)[0];
  }
  if (!s.local_gradient) {
    s.local_gradient = std::move(reduced);
    return;
  }
  // Gradient accumulation over several backward passes before one step.
  if (s.local_gradient->GetDataType() == DataType::Float32 && cpu::IsCpuTensor(*s.local_gradient)) {
    const auto into = cpu::Elements<DataType::Float32>(*s.local_gradient);
    const auto add = cpu::Elements<DataType::Float32>(*reduced);
    for (std::size_t i = 0; i < into.size(); ++i) into[i] += add[i];
  } else {
    std::vector<float> sum = s.local_gradient->ToFloatVector();
    const auto add = cpu::Elements<DataType::Float32>(*reduced);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += add[i];
    s.local_gradient->CopyFromFloats(sum);
  }
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
  // Keep an FP32 CPU shard for the next ReduceGradients() to reduce into.
  if (s.local_gradient && s.local_gradient->GetDataType() == DataType::Float32 && cpu::IsCpuTensor(*s.local_gradient) &&
      s.local_gradient->Size() == s.shard_size) {
    s.spare_gradient = std::move(s.local_gradient);
  }
  s.local_gradient.reset();
}

}  // namespace mlframework::distributed::fsdp
