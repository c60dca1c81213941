#include <mlframework/distributed/fsdp/FSDP.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/AbortGuard.hpp>
#include <mlframework/distributed/Float8Amax.hpp>

#include "mlframework/core/StateBlob.hpp"
#include "mlframework/distributed/Agreement.hpp"
#include "mlframework/distributed/fsdp/Hooks.hpp"
#include "mlframework/distributed/fsdp/MasterShards.hpp"
#include "mlframework/distributed/fsdp/ShardingGroups.hpp"
#include "mlframework/distributed/fsdp/UnitImpl.hpp"

namespace mlframework::distributed::fsdp {

namespace {

constexpr char kBlobKind[] = "distributed.fsdp.FSDP";
constexpr std::uint16_t kBlobVersion = 1;

// FNV-1a over the unit's layout, cut to 52 bits so it travels exactly in a double.
std::uint64_t LayoutHash(const std::string& unit, const std::vector<std::string>& names,
                         const std::vector<Shape>& shapes) {
  std::uint64_t hash = 1469598103934665603ull;
  auto mix = [&hash](const void* data, std::size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) {
      hash ^= bytes[i];
      hash *= 1099511628211ull;
    }
  };
  mix(unit.data(), unit.size() + 1);
  for (std::size_t i = 0; i < names.size(); ++i) {
    mix(names[i].c_str(), names[i].size() + 1);
    const std::uint64_t rank = shapes[i].size();
    mix(&rank, sizeof rank);
    for (const std::size_t extent : shapes[i]) {
      const std::uint64_t e = extent;
      mix(&e, sizeof e);
    }
  }
  return hash & ((1ull << 52) - 1);
}

// Where the buffers of a unit of @p parameters live: on their common device through the first
// parameter's backend when it can allocate and view there, else on the host through the backend
// of core's CPU tensors. @p fixed is the placement of the units registered before (null for the
// first unit).
detail::Placement PlacementOf(const GradientMap& parameters, const std::string& unit, const detail::Placement* fixed) {
  const auto& [first_name, first] = *parameters.begin();
  detail::Placement placement;
  placement.device = first->GetDevice();
  for (const auto& [param_name, tensor] : parameters) {
    const Device device = tensor->GetDevice();
    if (device != placement.device) {
      std::string message = "parameter '";
      message.append(param_name).append("' of unit '").append(unit).append("' is on ").append(device.ToString());
      message.append(" but parameter '").append(first_name).append("' is on ").append(placement.device.ToString());
      message.append(": all parameters of one FSDP must share one device");
      throw ArgumentError("parameters[" + param_name + "]", message);
    }
  }
  if (fixed != nullptr) {
    if (fixed->device != placement.device) {
      throw ArgumentError("parameters[" + first_name + "]",
                          "parameter '" + first_name + "' of unit '" + unit + "' is on " + placement.device.ToString() +
                              " but the units registered before are on " + fixed->device.ToString() +
                              ": all parameters of one FSDP must share one device");
    }
    return *fixed;
  }
  // The probe runs on every rank inside the agreed check.
  if (const TensorBackend* backend = first->Backend(); backend != nullptr) {
    try {
      const TensorPtr probe = backend->Allocate({1}, DataType::Float32, placement.device);
      static_cast<void>(backend->View(probe, 0, {1}));
      placement.backend = backend;
      placement.buffer_device = placement.device;
      return placement;
    } catch (const InvalidOperationError&) {
      // The backend keeps the TensorBackend defaults: host buffers below.
    }
  }
  const TensorPtr host = Zeros({1}, DataType::Float32, Device::CPU());
  placement.backend = host->Backend();
  placement.buffer_device = host->GetDevice();
  if (placement.backend == nullptr) {
    throw InvalidOperationError("FSDP unit '" + unit + "': core's CPU tensors have no backend to make unit buffers");
  }
  return placement;
}

std::string Show(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

}  // namespace

std::string_view ToString(ShardingStrategy strategy) noexcept {
  switch (strategy) {
    case ShardingStrategy::FullShard:
      return "FullShard";
    case ShardingStrategy::ShardGradOp:
      return "ShardGradOp";
    case ShardingStrategy::NoShard:
      return "NoShard";
    case ShardingStrategy::HybridShard:
      return "HybridShard";
  }
  return "unknown";
}

std::string_view ToString(GradientWire wire) noexcept {
  switch (wire) {
    case GradientWire::ReduceDType:
      return "ReduceDType";
    case GradientWire::Float8Blocks:
      return "Float8Blocks";
  }
  return "unknown";
}

namespace {
bool IsValid(GradientWire wire) noexcept {
  return wire == GradientWire::ReduceDType || wire == GradientWire::Float8Blocks;
}
}  // namespace

void FSDPConfig::Validate() const {
  if (Strategy != ShardingStrategy::FullShard && Strategy != ShardingStrategy::ShardGradOp &&
      Strategy != ShardingStrategy::NoShard && Strategy != ShardingStrategy::HybridShard) {
    throw ArgumentError("Strategy", "unknown ShardingStrategy " + std::to_string(static_cast<int>(Strategy)));
  }
  detail::ValidateShardGroupSize(Strategy, ShardGroupSize);
  if (!IsValid(ParamDType)) {
    throw ArgumentError("ParamDType", "unknown DataType " + std::to_string(static_cast<int>(ParamDType)));
  }
  if (!IsValid(ReduceDType)) {
    throw ArgumentError("ReduceDType", "unknown DataType " + std::to_string(static_cast<int>(ReduceDType)));
  }
  // FP8 parameters gather with their scales (FSDPShardingUnit.cpp); gradients are never reduced in
  // FP8 (a sum rounded to 3 mantissa bits at every step).
  if (IsFloat8(ReduceDType)) {
    throw ArgumentError("ReduceDType", std::string(ToString(ReduceDType)) +
                                           " cannot reduce gradients: use Float32, Float16 or BFloat16");
  }
  if (!IsValid(Wire)) {
    throw ArgumentError("Wire", "unknown GradientWire " + std::to_string(static_cast<int>(Wire)));
  }
  detail::ValidateMasterDType(MasterDType, "MasterDType");
  // At most 2^20 elements: a larger quantum is a mistake (an element count or a byte size).
  if (ShardAlignment == 0 || ShardAlignment > (std::size_t{1} << 20)) {
    throw ArgumentError("ShardAlignment", "must be from 1 to 1048576 elements, got " + std::to_string(ShardAlignment));
  }
}

void UnitPrecision::Validate() const {
  if (ParamDType && !IsValid(*ParamDType)) {
    throw ArgumentError("precision.ParamDType", "unknown DataType " + std::to_string(static_cast<int>(*ParamDType)));
  }
  if (ReduceDType && !IsValid(*ReduceDType)) {
    throw ArgumentError("precision.ReduceDType", "unknown DataType " + std::to_string(static_cast<int>(*ReduceDType)));
  }
  // As FSDPConfig::Validate: FP8 gathers, never FP8 reductions.
  if (ReduceDType && IsFloat8(*ReduceDType)) {
    throw ArgumentError("precision.ReduceDType", std::string(ToString(*ReduceDType)) +
                                                     " cannot reduce gradients: use Float32, Float16 or BFloat16");
  }
  if (Wire && !IsValid(*Wire)) {
    throw ArgumentError("precision.Wire", "unknown GradientWire " + std::to_string(static_cast<int>(*Wire)));
  }
  if (MasterDType) detail::ValidateMasterDType(*MasterDType, "precision.MasterDType");
}

struct FSDP::Impl {
  std::shared_ptr<IProcessGroup> group;
  detail::ShardingGroups groups;  // where units gather and reduce (HybridShard: subgroups of `group`)
  FSDPConfig config;
  detail::Placement placement;         // the parameters' device, fixed by the first unit
  detail::BufferPool pool{placement};  // before the units: they hand buffers back to it
  std::vector<std::unique_ptr<FSDPShardingUnit>> units;
  bool requires_sync = true;  // read by the units' ReduceGradients()

  // Idle pool memory is capped at one use of the largest unit, in its own dtypes: its gathered
  // buffer, its flat gradient buffer and the shard-sized scratch of a 16-bit reduction or an
  // accumulation.
  void UpdatePoolCapacity() noexcept {
    std::size_t capacity = 0;
    for (const auto& unit : units) {
      // The FP8 wire flattens into an FP32 buffer (its codes are the collective's own memory).
      const std::size_t reduce = unit->Wire() == GradientWire::Float8Blocks ? ElementSize(DataType::Float32)
                                                                            : ElementSize(unit->ReduceDType());
      // (The FP8 wire's codes and scales travel through a few MiB of per-thread scratch of its
      // own, Float8BlockReduce.cpp, not through the pool.)
      capacity = std::max(capacity, unit->PaddedSize() * (ElementSize(unit->ParamDType()) + reduce) +
                                        unit->ShardSize() * (ElementSize(DataType::Float32) + reduce));
    }
    pool.SetCapacity(capacity);
  }

  // The global norm of the gradient shards (a collective; GradNorm() after its check).
  double AgreedNorm() const {
    const std::vector<TensorPtr> list = GradientList();
    const double sum = list.empty() ? 0.0 : SumOfSquares(list);
    return std::sqrt(detail::AgreedSquareSum(*group, groups, config.Strategy, sum));
  }

  std::vector<TensorPtr> GradientList() const {
    std::vector<TensorPtr> list;
    for (const auto& unit : units) {
      if (TensorPtr gradient = unit->LocalGradient()) list.push_back(std::move(gradient));
    }
    return list;
  }
};

FSDP::FSDP(std::shared_ptr<IProcessGroup> group, FSDPConfig config) {
  if (!group) throw ArgumentNullError("group");
  detail::ShardingGroups groups = detail::MakeShardingGroups(group, config);  // validates config
  impl_ = std::make_unique<Impl>();
  impl_->group = std::move(group);
  impl_->groups = std::move(groups);
  impl_->config = config;
}

FSDP::~FSDP() = default;

namespace {

// One number for a unit's policy, so ranks compare it with the rest of the layout: each dtype
// and the wire are their value plus one, 0 when unset.
double PrecisionCode(const UnitPrecision& precision, const FSDPConfig& config) {
  const auto code = [](const std::optional<DataType>& dtype) {
    return dtype ? static_cast<double>(static_cast<int>(*dtype)) + 1.0 : 0.0;
  };
  const double wire = precision.Wire ? static_cast<double>(static_cast<int>(*precision.Wire)) + 1.0 : 0.0;
  // The accumulation in effect, the FSDP's included: a rank that reduced its micro-batches while
  // another summed them locally would wait for a reduction that never comes.
  const double accumulation = precision.ShardedAccumulation.value_or(config.ShardedAccumulation) ? 1.0 : 0.0;
  // The master dtype in effect: ranks with FP32 and BF16 shards would gather different bytes.
  const double master = precision.MasterDType.value_or(config.MasterDType) == DataType::BFloat16 ? 1.0 : 0.0;
  return (((((code(precision.ParamDType) * 256.0 + code(precision.ReduceDType)) * 256.0 + wire) * 2.0) + accumulation) *
          2.0) +
         master;
}

// The config fields every rank must share, as exact numbers (ShardAlignment <= 2^20, checked
// by FSDPConfig::Validate()), compared by RegisterUnit(); HybridShard's ShardGroupSize is agreed
// by the constructor.
double ShardingCode(const FSDPConfig& config) {
  return (static_cast<double>(static_cast<int>(config.Strategy)) * 2097152.0 +
          static_cast<double>(config.ShardAlignment)) *
             2.0 +
         (config.SyncModuleStates ? 1.0 : 0.0);
}

double DTypeCode(const FSDPConfig& config) {
  return (static_cast<double>(static_cast<int>(config.ParamDType)) * 256.0 +
          static_cast<double>(static_cast<int>(config.ReduceDType))) *
             4.0 +
         static_cast<double>(static_cast<int>(config.Wire));
}

// This rank's values of the fields of ShardingCode() (@p sharding) or DTypeCode().
std::string DescribeConfig(const FSDPConfig& config, bool sharding) {
  std::string text;
  if (sharding) {
    text.append("Strategy ").append(ToString(config.Strategy));
    text.append(", ShardAlignment ").append(std::to_string(config.ShardAlignment));
    text.append(", SyncModuleStates ").append(config.SyncModuleStates ? "true" : "false");
  } else {
    text.append("ParamDType ").append(mlframework::ToString(config.ParamDType));
    text.append(", ReduceDType ").append(mlframework::ToString(config.ReduceDType));
    text.append(", Wire ").append(ToString(config.Wire));
  }
  return text;
}

}  // namespace

FSDPShardingUnit& FSDP::RegisterUnit(const std::string& name, const GradientMap& parameters,
                                     const UnitPrecision& precision) {
  IProcessGroup& group = *impl_->group;
  const int world = group.WorldSize();
  const bool sharded = impl_->config.Strategy != ShardingStrategy::NoShard;
  auto unit = std::make_unique<FSDPShardingUnit::Impl>();
  unit->group = impl_->group.get();
  unit->shard_group = impl_->groups.shard.get();
  unit->replicate_group = impl_->groups.replicate.get();
  const int shard_world = unit->shard_group->WorldSize();  // ranks it is sharded over
  unit->config = &impl_->config;
  unit->pool = &impl_->pool;
  unit->placement = &impl_->placement;
  unit->name = name;
  unit->precision = precision;
  unit->requires_sync = &impl_->requires_sync;
  std::vector<TensorPtr> sources;
  detail::Placement placement = impl_->placement;

  distributed::detail::AgreeOn(group, "RegisterUnit('" + name + "')", [&] {
    if (name.empty()) throw ArgumentError("name", "a unit needs a non-empty name");
    for (const auto& existing : impl_->units) {
      if (existing->Name() == name) throw ArgumentError("name", "a unit named '" + name + "' is already registered");
    }
    precision.Validate();
    if (parameters.empty()) throw ArgumentError("parameters", "unit '" + name + "' has no parameters");
    for (const auto& [param_name, tensor] : parameters) {
      if (!tensor) throw ArgumentNullError("parameters[" + param_name + "]");
      if (tensor->Size() == 0) {
        std::string message = "parameter '";
        message.append(param_name).append("' of unit '").append(name).append("' has size 0 (shape ");
        message.append(mlframework::ToString(tensor->GetShape())).append(")");
        throw ArgumentError("parameters[" + param_name + "]", message);
      }
      unit->offsets.push_back(unit->numel);
      unit->names.push_back(param_name);
      unit->shapes.push_back(tensor->GetShape());
      unit->numel += tensor->Size();
      sources.push_back(tensor);
    }
    placement = PlacementOf(parameters, name, impl_->units.empty() ? nullptr : &impl_->placement);
    if (sharded && unit->numel < static_cast<std::size_t>(shard_world)) {
      throw ArgumentError("parameters", "unit '" + name + "' has " + std::to_string(unit->numel) +
                                            " elements, fewer than the ranks it is sharded over " +
                                            std::to_string(shard_world) +
                                            ": merge it into a larger unit or use ShardingStrategy::NoShard");
    }
  });

  // Every rank must describe the same unit and use the same FSDPConfig (ranks with other
  // strategies, alignments or dtypes would gather and reduce different sizes and bytes, or skip
  // a gather the others run): compare max and min of each field in one all-reduce.
  const FSDPConfig& config = impl_->config;
  const std::array<const char*, 8> fields{"world size",
                                          "unit index",
                                          "element count",
                                          "parameter count",
                                          "parameter names and shapes",
                                          "precision (ParamDType, ReduceDType, Wire, ShardedAccumulation, MasterDType)",
                                          "FSDPConfig's Strategy, ShardAlignment and SyncModuleStates",
                                          "FSDPConfig's ParamDType, ReduceDType and Wire"};
  const std::array<double, 8> mine{static_cast<double>(world),
                                   static_cast<double>(impl_->units.size()),
                                   static_cast<double>(unit->numel),
                                   static_cast<double>(unit->names.size()),
                                   static_cast<double>(LayoutHash(name, unit->names, unit->shapes)),
                                   PrecisionCode(precision, impl_->config),
                                   ShardingCode(config),
                                   DTypeCode(config)};
  std::array<double, 16> extremes{};
  for (std::size_t i = 0; i < mine.size(); ++i) {
    extremes[i] = mine[i];
    extremes[i + mine.size()] = -mine[i];
  }
  group.AllReduceHost(extremes, ReduceOp::Max);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const double high = extremes[i];
    const double low = -extremes[i + mine.size()];
    if (high == low) continue;
    if (i >= 6) {
      // The codes mean nothing to a reader: this rank's values instead.
      throw ArgumentError("config", "RegisterUnit('" + name + "'): ranks disagree on the " + fields[i] +
                                        " (this rank: " + DescribeConfig(config, i == 6) +
                                        "); every rank must use the same FSDPConfig");
    }
    throw ArgumentError("parameters", "RegisterUnit('" + name + "'): ranks disagree on the " + fields[i] +
                                          " (this rank " + Show(mine[i]) + ", min " + Show(low) + ", max " +
                                          Show(high) + "); every rank must register the same units");
  }

  AbortGuard guard(group, "FSDP RegisterUnit('" + name + "')");
  impl_->placement = placement;  // the same for every unit (PlacementOf() checked it)
  unit->PlaceShard(sources);
  impl_->units.push_back(std::unique_ptr<FSDPShardingUnit>(new FSDPShardingUnit(std::move(unit))));
  impl_->UpdatePoolCapacity();
  return *impl_->units.back();
}

std::size_t FSDP::UnitCount() const noexcept { return impl_->units.size(); }

FSDPShardingUnit& FSDP::Unit(std::size_t index) {
  if (index >= impl_->units.size()) {
    throw ArgumentError("index", "unit index " + std::to_string(index) + " is out of range (" +
                                     std::to_string(impl_->units.size()) + " units)");
  }
  return *impl_->units[index];
}

FSDPShardingUnit& FSDP::Unit(const std::string& name) {
  for (const auto& unit : impl_->units) {
    if (unit->Name() == name) return *unit;
  }
  throw ArgumentError("name", "no unit named '" + name + "'");
}

IProcessGroup& FSDP::ProcessGroup() const noexcept { return *impl_->group; }
IProcessGroup& FSDP::ShardGroup() const noexcept { return *impl_->groups.shard; }
IProcessGroup* FSDP::ReplicateGroup() const noexcept { return impl_->groups.replicate.get(); }
const FSDPConfig& FSDP::Config() const noexcept { return impl_->config; }

void FSDP::SetParamDType(DataType dtype) {
  if (!IsValid(dtype)) throw ArgumentError("dtype", "unknown DataType " + std::to_string(static_cast<int>(dtype)));
  for (const auto& unit : impl_->units) {
    if (unit->IsGathered() || unit->IsGatherInFlight()) {
      throw InvalidOperationError("cannot change the parameter dtype while unit '" + unit->Name() +
                                  "' is gathered: release it first");
    }
  }
  impl_->config.ParamDType = dtype;
  impl_->UpdatePoolCapacity();
}

void FSDP::AgreeAmax(fp8::IScalingRecipe& recipe) { AllReduceAmax(ProcessGroup(), recipe); }

void FSDP::SetRequiresGradientSync(bool requires_sync) noexcept { impl_->requires_sync = requires_sync; }

bool FSDP::RequiresGradientSync() const noexcept { return impl_->requires_sync; }

std::size_t FSDP::CachedBufferBytes() const noexcept { return impl_->pool.IdleBytes(); }

std::size_t FSDP::BufferBytesInUse() const noexcept { return impl_->pool.InUseBytes(); }

std::size_t FSDP::CachedBufferLimit() const noexcept { return impl_->pool.Capacity(); }

void FSDP::ReleaseCachedBuffers() noexcept { impl_->pool.Clear(); }

GradientMap FSDP::ShardedParameters() const {
  GradientMap result;
  for (const auto& unit : impl_->units) result.emplace(unit->Name(), unit->LocalShard());
  return result;
}

GradientMap FSDP::LocalGradients() const {
  GradientMap result;
  for (const auto& unit : impl_->units) {
    if (!unit->LocalGradient()) {
      throw InvalidOperationError("unit '" + unit->Name() + "' has no gradient: call ReduceGradients() first");
    }
    result.emplace(unit->Name(), unit->LocalGradient());
  }
  return result;
}

namespace {
// InvalidOperationError (local) naming the first unit whose gradient shard is not complete: a
// reduction in flight, or micro-batches summed without sync (their sum is not in the shard, so
// a norm would leave it out and clipping would scale only part of the step's gradients).
void RefuseIncompleteGradients(FSDP& fsdp) {
  detail::RefuseReductionsInFlight(fsdp);
  for (std::size_t i = 0; i < fsdp.UnitCount(); ++i) {
    const FSDPShardingUnit& unit = fsdp.Unit(i);
    if (unit.HasUnsyncedGradients()) {
      throw InvalidOperationError("unit '" + unit.Name() +
                                  "' holds gradients accumulated without sync: reduce the last micro-batch with "
                                  "SetRequiresGradientSync(true) before the norm");
    }
  }
}
}  // namespace

double FSDP::GradNorm() {
  distributed::detail::AgreeOn(*impl_->group, "FSDP::GradNorm", [&] { RefuseIncompleteGradients(*this); });
  return impl_->AgreedNorm();
}

double FSDP::ClipGradNorm(float max_norm) {
  // Agreed before the norm's collectives, in the one all-reduce of GradNorm()'s check: a rank
  // refusing alone would leave the others waiting in them, and ranks clipping to different
  // bounds would step to different weights. [bound invalid here, bound, -bound] ride in it (MAX).
  const bool valid = std::isfinite(max_norm) && max_norm > 0.0f;
  const double bound = valid ? static_cast<double>(max_norm) : 0.0;
  std::array<double, 3> agreed{valid ? 0.0 : 1.0, bound, -bound};
  distributed::detail::AgreeOn(
      *impl_->group, "FSDP::ClipGradNorm", [&] { RefuseIncompleteGradients(*this); }, agreed);
  if (!valid) throw ArgumentError("max_norm", "must be finite and > 0, got " + Show(max_norm));
  if (agreed[0] > 0.0) {
    throw ArgumentError("max_norm",
                        "FSDP::ClipGradNorm: an invalid max_norm on another rank; every rank stops here "
                        "together");
  }
  if (agreed[1] != -agreed[2]) {
    throw ArgumentError("max_norm", "ranks disagree on max_norm (this rank " + Show(max_norm) + ", min " +
                                        Show(-agreed[2]) + ", max " + Show(agreed[1]) +
                                        "); every rank must clip to the same bound");
  }
  const double norm = impl_->AgreedNorm();
  const double coefficient = static_cast<double>(max_norm) / (norm + 1e-6);
  // Every rank computed the same norm, so every rank takes the same branch.
  if (std::isfinite(norm) && coefficient < 1.0) {
    ScaleInPlace(impl_->GradientList(), static_cast<float>(coefficient));
  }
  return norm;
}

void FSDP::Step(amp::IOptimizer& optimizer) {
  GradientMap gradients;
  amp::IOptimizerState* const state = optimizer.State();
  // Checks only: nothing changes on any rank until every rank passed them.
  distributed::detail::AgreeOn(*impl_->group, "FSDP::Step", [&] {
    for (const auto& unit : impl_->units) {
      if (unit->IsGathered() || unit->IsGatherInFlight()) {
        throw InvalidOperationError("unit '" + unit->Name() + "' is still gathered: release it before the step");
      }
      if (unit->HasUnsyncedGradients()) {
        throw InvalidOperationError("unit '" + unit->Name() +
                                    "' holds gradients accumulated without sync: reduce the last micro-batch "
                                    "with SetRequiresGradientSync(true) before the step");
      }
    }
    detail::RefuseReductionsInFlight(*this);
    for (const auto& unit : impl_->units) detail::RequireMatchingMasters(*unit, state, "optimizer");
    gradients = LocalGradients();
    // What SetGradients() of an optimizer with a state checks, checked here without handing the
    // gradients over, so the library's optimizers are refused before any rank changes one.
    if (state != nullptr) detail::RequireGradientsFit(gradients, *state, "optimizer");
  });
  // The optimizer's own SetGradients() checks, agreed: when another rank's optimizer refuses,
  // one that took the gradients here is handed back those it held before.
  GradientMap previous;
  bool taken = false;
  try {
    distributed::detail::AgreeOn(*impl_->group, "FSDP::Step", [&] {
      previous = optimizer.GetGradients();
      optimizer.SetGradients(gradients);
      taken = true;
    });
  } catch (...) {
    if (taken) {
      try {
        optimizer.SetGradients(previous);
      } catch (...) {  // NOLINT(bugprone-empty-catch): the agreed error below is the one to report
      }
    }
    throw;
  }
  // The update runs on this rank only; if it throws, the next collective would hang.
  AbortGuard guard(*impl_->group, "FSDP Step (optimizer)");
  if (state != nullptr) {
    // Stochastic rounding draws its bits by the element's index in the unit's flat buffer,
    // which is the same at every world size (the shard's own index is not). Every name is a
    // parameter of the optimizer (checked above).
    std::map<std::string, std::uint64_t> offsets;
    for (const auto& unit : impl_->units) offsets.emplace(unit->Name(), unit->ShardOffset());
    state->SetElementOffsets(offsets);
  }
  optimizer.Step();
  for (const auto& unit : impl_->units) {
    unit->Invalidate();
    unit->ZeroGrad();
  }
}

void FSDP::ZeroGrad() noexcept {
  for (const auto& unit : impl_->units) unit->ZeroGrad();
}

GradientMap FSDP::FullParameters() {
  GradientMap result;
  for (const auto& unit : impl_->units) unit->AppendFullParameters(result);
  return result;
}

std::vector<std::byte> FSDP::StateDict() const {
  mlframework::detail::BlobWriter writer(kBlobKind, kBlobVersion);
  writer.U32(static_cast<std::uint32_t>(impl_->group->WorldSize()));
  writer.U32(static_cast<std::uint32_t>(impl_->group->Rank()));
  writer.U8(static_cast<std::uint8_t>(impl_->config.Strategy));
  writer.U64(impl_->units.size());
  for (const auto& unit : impl_->units) {
    const std::string& name = unit->Name();
    writer.U64(name.size());
    writer.Bytes(std::as_bytes(std::span<const char>(name.data(), name.size())));
    writer.U64(unit->PaddedSize());
    writer.U64(unit->ShardSize());
    // The shard's values in FP32 (a BF16 shard widened exactly), read back when the host
    // cannot address them (a checkpoint, not a step).
    const TensorPtr shard = unit->LocalShard();
    if (const std::span<const std::byte> bytes = shard->HostBytes();
        !bytes.empty() && shard->GetDataType() == DataType::Float32) {
      writer.Bytes(bytes);
    } else {
      const std::vector<float> values = shard->ToFloatVector();
      writer.Bytes(std::as_bytes(std::span<const float>(values.data(), values.size())));
    }
  }
  return writer.Finish();
}

void FSDP::LoadStateDict(std::span<const std::byte> state) {
  std::vector<std::vector<float>> shards;
  distributed::detail::AgreeOn(*impl_->group, "FSDP::LoadStateDict", [&] {
    detail::RefuseLoadWhileBusy(*this);
    mlframework::detail::BlobReader reader(state, kBlobKind, kBlobVersion);
    const std::uint32_t world = reader.U32();
    const std::uint32_t rank = reader.U32();
    const std::uint8_t strategy = reader.U8();
    if (world != static_cast<std::uint32_t>(impl_->group->WorldSize())) {
      reader.Fail("was saved with world size " + std::to_string(world) + ", this group has world size " +
                  std::to_string(impl_->group->WorldSize()));
    }
    if (rank != static_cast<std::uint32_t>(impl_->group->Rank())) {
      reader.Fail("was saved by rank " + std::to_string(rank) + ", loaded on rank " +
                  std::to_string(impl_->group->Rank()));
    }
    if (strategy != static_cast<std::uint8_t>(impl_->config.Strategy)) {
      reader.Fail("was saved with sharding strategy " + std::to_string(strategy) + ", this FSDP uses " +
                  std::string(ToString(impl_->config.Strategy)));
    }
    const std::uint64_t count = reader.U64();
    if (count != impl_->units.size()) {
      reader.Fail("holds " + std::to_string(count) + " units, this FSDP has " + std::to_string(impl_->units.size()));
    }
    for (const auto& unit : impl_->units) {
      const std::uint64_t length = reader.U64();
      if (length > 4096) reader.Fail("unit name length " + std::to_string(length) + " is implausible");
      const auto name_bytes = reader.Bytes(static_cast<std::size_t>(length));
      const std::string name(reinterpret_cast<const char*>(name_bytes.data()), name_bytes.size());
      const std::uint64_t padded = reader.U64();
      const std::uint64_t shard_size = reader.U64();
      if (name != unit->Name() || padded != unit->PaddedSize() || shard_size != unit->ShardSize()) {
        reader.Fail("unit '" + name + "' (" + std::to_string(padded) + " padded elements, shard " +
                    std::to_string(shard_size) + ") does not match unit '" + unit->Name() + "' (" +
                    std::to_string(unit->PaddedSize()) + ", shard " + std::to_string(unit->ShardSize()) + ")");
      }
      const auto bytes = reader.Bytes(static_cast<std::size_t>(shard_size) * sizeof(float));
      std::vector<float> values(static_cast<std::size_t>(shard_size));
      std::memcpy(values.data(), bytes.data(), bytes.size());
      shards.push_back(std::move(values));
    }
    reader.ExpectEnd();
  });
  // Every rank decoded its blob: commit.
  for (std::size_t i = 0; i < impl_->units.size(); ++i) impl_->units[i]->LoadShard(shards[i]);
}

}  // namespace mlframework::distributed::fsdp
