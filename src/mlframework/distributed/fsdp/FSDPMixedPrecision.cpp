// Spec 002: FSDPMixedPrecisionConfig, FSDPMixedPrecisionManager, FSDPAmpIntegration.
#include <mlframework/distributed/fsdp/FSDPAmpIntegration.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionConfig.hpp>
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>

#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>

#include "mlframework/amp/ScaleStateOwner.hpp"
#include "mlframework/core/StateBlob.hpp"

namespace mlframework::distributed::fsdp {

namespace {
constexpr char kManagerKind[] = "distributed.fsdp.FSDPMixedPrecisionManager";
constexpr std::uint16_t kManagerVersion = 1;

// Null entries are skipped, as the spec's loop does.
std::vector<TensorPtr> NonNull(const GradientMap& gradients) {
  std::vector<TensorPtr> list;
  list.reserve(gradients.size());
  for (const auto& entry : gradients) {
    if (entry.second) list.push_back(entry.second);
  }
  return list;
}
}  // namespace

// ---- FSDPMixedPrecisionConfig ----

void FSDPMixedPrecisionConfig::Validate() const {
  if (ForwardDType != TensorDataType::Float16 && ForwardDType != TensorDataType::BFloat16) {
    throw ArgumentError("ForwardDType", "must be Float16 or BFloat16, got " +
                                            (IsValid(ForwardDType) ? std::string(ToString(ForwardDType))
                                                                   : std::to_string(static_cast<int>(ForwardDType))));
  }
  if (BackwardDType != TensorDataType::Float32) {
    throw ArgumentError("BackwardDType",
                        "must be Float32 for stability, got " +
                            (IsValid(BackwardDType) ? std::string(ToString(BackwardDType))
                                                    : std::to_string(static_cast<int>(BackwardDType))));
  }
  amp::ScalePolicyFieldNames names;
  names.InitialScale = "InitialLossScale";
  names.GrowthFactor = "LossScaleGrowthFactor";
  names.BackoffFactor = "LossScaleBackoffFactor";
  names.GrowthInterval = "LossScaleSteps";
  names.MinScale = "MinLossScale";
  names.MaxScale = "MaxLossScale";
  amp::ValidateScalePolicy(ToScalePolicy(), names);
}

amp::ScalePolicy FSDPMixedPrecisionConfig::ToScalePolicy() const {
  return amp::ScalePolicy{.InitialScale = InitialLossScale,
                          .GrowthFactor = LossScaleGrowthFactor,
                          .BackoffFactor = LossScaleBackoffFactor,
                          .GrowthInterval = LossScaleSteps,
                          .MinScale = MinLossScale,
                          .MaxScale = MaxLossScale,
                          .Hysteresis = 1};
}

// ---- FSDPMixedPrecisionManager ----

FSDPMixedPrecisionManager::FSDPMixedPrecisionManager(FSDPMixedPrecisionConfig config, FSDP& fsdp)
    : config_((config.Validate(), config)),
      policy_(config_.ToScalePolicy()),
      fsdp_(fsdp),
      owner_(std::make_unique<amp::detail::ScaleStateOwner>(policy_, amp::ScaleState::Initial(policy_))) {}

FSDPMixedPrecisionManager::~FSDPMixedPrecisionManager() = default;

TensorPtr FSDPMixedPrecisionManager::CastTensor(const TensorPtr& tensor, TensorDataType targetDType) const {
  if (tensor->GetDataType() == targetDType) return tensor;              // no conversion needed
  return Cast(std::span<const TensorPtr>(&tensor, 1), targetDType)[0];  // one fused cast pass
}

TensorPtr FSDPMixedPrecisionManager::ConvertToMixedPrecision(const TensorPtr& gatheredParam) const {
  if (!gatheredParam) throw ArgumentNullError("gatheredParam");
  if (!config_.Enabled) return gatheredParam;
  return CastTensor(gatheredParam, config_.ForwardDType);
}

TensorPtr FSDPMixedPrecisionManager::ConvertGradientToFP32(const TensorPtr& mixedPrecisionGrad) const {
  if (!mixedPrecisionGrad) throw ArgumentNullError("mixedPrecisionGrad");
  return CastTensor(mixedPrecisionGrad, config_.BackwardDType);
}

TensorPtr FSDPMixedPrecisionManager::ScaleLoss(const TensorPtr& loss) const {
  if (!loss) throw ArgumentNullError("loss");
  if (!config_.UseLossScaling) return loss;
  return owner_->ScaleLoss(loss);
}

bool FSDPMixedPrecisionManager::Decide(bool local_overflow) {
  // MAX over ranks before the scale changes: every rank takes the same decision.
  const bool overflow = fsdp_.ProcessGroup().AllReduceHost(local_overflow ? 1.0 : 0.0, ReduceOp::Max) > 0.0;
  owner_->Update(overflow);
  return overflow;
}

bool FSDPMixedPrecisionManager::DecideOnDevice(const DeviceScalingBackend& backend) {
  IProcessGroup& group = fsdp_.ProcessGroup();
  DeviceScaleState& state = *owner_->DeviceState();
  if (group.BackendName() != "nccl") {
    // MPI and local groups reduce host values: read the local flag once and agree as for host tensors.
    const bool local = owner_->Recorded();
    owner_->ClearRecord();
    return Decide(local);
  }
  // NCCL: flag -> one-element device tensor -> AllReduce MAX on the device -> flag, then the
  // update kernel; all queued on the device. The decision is read once because it is returned.
  backend.FlagToTensor(state, flag_tensor_);
  group.AllReduce(*flag_tensor_, ReduceOp::Max);
  backend.FlagFromTensor(state, *flag_tensor_);
  owner_->NoteDeviceRecord();
  owner_->UpdateFromRecord();
  // An overflowed update leaves ConsecutiveOverflows >= 1, a clean one 0.
  return owner_->Read().ConsecutiveOverflows > 0;
}

bool FSDPMixedPrecisionManager::CheckOverflow(const GradientMap& gradients) {
  if (!config_.UseLossScaling) return false;
  const std::vector<TensorPtr> list = NonNull(gradients);
  const DeviceScalingBackend* backend = list.empty() ? nullptr : owner_->Route(list, "gradients");
  if (backend == nullptr) {
    return Decide(!list.empty() && HasNonFinite(list));
  }
  std::vector<const ITensor*> raw;
  raw.reserve(list.size());
  for (const TensorPtr& tensor : list) raw.push_back(tensor.get());
  owner_->ClearRecord();
  backend->CheckWithState(raw, *owner_->DeviceState());
  owner_->NoteDeviceRecord();
  return DecideOnDevice(*backend);
}

bool FSDPMixedPrecisionManager::UnscaleAndCheckOverflow(const GradientMap& gradients) {
  const std::vector<TensorPtr> list = NonNull(gradients);
  if (!config_.UseLossScaling) return false;
  const DeviceScalingBackend* backend = list.empty() ? nullptr : owner_->Route(list, "gradients");
  if (backend == nullptr) {
    return Decide(!list.empty() && UnscaleAndCheck(list, 1.0f / owner_->Read().Scale));
  }
  std::vector<ITensor*> raw;
  raw.reserve(list.size());
  for (const TensorPtr& tensor : list) raw.push_back(tensor.get());
  owner_->ClearRecord();
  backend->UnscaleWithState(raw, *owner_->DeviceState());  // times InverseScale(scale) read on the device
  owner_->NoteDeviceRecord();
  return DecideOnDevice(*backend);
}

float FSDPMixedPrecisionManager::CurrentLossScale() const { return owner_->Read().Scale; }
std::int64_t FSDPMixedPrecisionManager::StepsSinceOverflow() const { return owner_->Read().StepsSinceLastOverflow; }
amp::ScaleState FSDPMixedPrecisionManager::State() const { return owner_->Read(); }
DeviceScaleState* FSDPMixedPrecisionManager::DeviceState() const noexcept { return owner_->DeviceState(); }
void FSDPMixedPrecisionManager::ResetLossScale() { owner_->Write(amp::ScaleState::Initial(policy_)); }
const FSDPMixedPrecisionConfig& FSDPMixedPrecisionManager::Config() const noexcept { return config_; }

std::vector<std::byte> FSDPMixedPrecisionManager::StateDict() const {
  mlframework::detail::BlobWriter writer(kManagerKind, kManagerVersion);
  writer.ScaleStateFields(owner_->Read());
  return writer.Finish();
}

void FSDPMixedPrecisionManager::LoadStateDict(std::span<const std::byte> state) {
  mlframework::detail::BlobReader reader(state, kManagerKind, kManagerVersion);
  const amp::ScaleState loaded = reader.ScaleStateFields();
  reader.ExpectEnd();
  if (loaded.Scale < policy_.MinScale || loaded.Scale > policy_.MaxScale) {
    reader.Fail("scale " + std::to_string(loaded.Scale) + " is outside [MinLossScale, MaxLossScale]");
  }
  owner_->Write(loaded);
}

// ---- FSDPAmpIntegration ----

FSDPAmpIntegration::FSDPAmpIntegration(FSDP& fsdp, std::optional<FSDPMixedPrecisionConfig> mpConfig)
    : fsdp_(fsdp), mp_manager_(mpConfig.value_or(FSDPMixedPrecisionConfig{}), fsdp) {
  // Cast before the all-gather rather than after it: 16-bit traffic.
  if (mp_manager_.Config().Enabled) fsdp_.SetParamDType(mp_manager_.Config().ForwardDType);
}

void FSDPAmpIntegration::ApplyMixedPrecision(FSDPShardingUnit& shardingUnit) {
  if (!shardingUnit.IsGathered() || !shardingUnit.GatheredParameter()) {
    throw InvalidOperationError("Parameter must be gathered first (unit '" + shardingUnit.Name() + "')");
  }
  TensorPtr converted = mp_manager_.ConvertToMixedPrecision(shardingUnit.GatheredParameter());
  if (converted != shardingUnit.GatheredParameter()) shardingUnit.SetGatheredParameter(std::move(converted));
}

void FSDPAmpIntegration::ApplyGradientFP32(FSDPShardingUnit& shardingUnit) {
  if (!shardingUnit.LocalGradient()) {
    throw InvalidOperationError("Gradients not computed yet (unit '" + shardingUnit.Name() + "')");
  }
  TensorPtr converted = mp_manager_.ConvertGradientToFP32(shardingUnit.LocalGradient());
  if (converted != shardingUnit.LocalGradient()) shardingUnit.SetLocalGradient(std::move(converted));
}

TensorPtr FSDPAmpIntegration::ScaleLoss(const TensorPtr& loss) { return mp_manager_.ScaleLoss(loss); }

bool FSDPAmpIntegration::CheckOverflow(const GradientMap& gradients) { return mp_manager_.CheckOverflow(gradients); }

FSDPMixedPrecisionManager& FSDPAmpIntegration::Manager() noexcept { return mp_manager_; }

}  // namespace mlframework::distributed::fsdp
