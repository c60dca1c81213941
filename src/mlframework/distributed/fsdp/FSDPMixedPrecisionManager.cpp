// Spec 002: FSDPMixedPrecisionManager.
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>

#include <array>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>

#include "mlframework/core/ScaleStateOwner.hpp"
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

FSDPMixedPrecisionManager::FSDPMixedPrecisionManager(FSDPMixedPrecisionConfig config, FSDP& fsdp)
    : config_((config.Validate(), config)),
      policy_(config_.ToScalePolicy()),
      fsdp_(fsdp),
      owner_(std::make_unique<mlframework::detail::ScaleStateOwner>(policy_, ScaleState::Initial(policy_))) {}

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

bool FSDPMixedPrecisionManager::Agree() {
  // MAX over ranks before the scale changes: every rank takes the same decision.
  IProcessGroup& group = fsdp_.ProcessGroup();
  if (group.BackendName() != "nccl") {
    // MPI and local groups reduce host values: the local flag is read once (with the amax while
    // tracked: the same all-reduce carries both).
    if (owner_->AmaxTracking()) {
      std::array<double, 2> values{owner_->Recorded() ? 1.0 : 0.0, static_cast<double>(owner_->Amax())};
      group.AllReduceHost(values, ReduceOp::Max);
      const bool overflow = values[0] > 0.0;
      owner_->Update(overflow);
      agreed_amax_ = static_cast<float>(values[1]);
      return overflow;
    }
    const bool local = owner_->Recorded();
    const bool overflow = group.AllReduceHost(local ? 1.0 : 0.0, ReduceOp::Max) > 0.0;
    owner_->Update(overflow);
    return overflow;
  }
  // NCCL: flag -> one-element tensor where the state lives -> AllReduce MAX there -> flag, then
  // the update; on a device all queued there. The decision is read once because it is returned.
  owner_->FlagToTensor(flag_tensor_);
  group.AllReduce(*flag_tensor_, ReduceOp::Max);
  owner_->FlagFromTensor(*flag_tensor_);  // the agreed amax too, while tracked
  owner_->UpdateFromRecord();
  if (owner_->AmaxTracking()) {
    agreed_amax_ = owner_->Amax();  // the update leaves the amax
  }
  // An overflowed update leaves ConsecutiveOverflows >= 1, a clean one 0.
  return owner_->Read().ConsecutiveOverflows > 0;
}

bool FSDPMixedPrecisionManager::CheckOverflow(const GradientMap& gradients) {
  if (!config_.UseLossScaling) return false;
  const std::vector<TensorPtr> list = NonNull(gradients);
  owner_->Place(list, "gradients");
  owner_->ClearRecord();
  owner_->Check(list);
  return Agree();
}

bool FSDPMixedPrecisionManager::UnscaleAndCheckOverflow(const GradientMap& gradients) {
  const std::vector<TensorPtr> list = NonNull(gradients);
  if (!config_.UseLossScaling) {
    // Nothing to unscale, but the gradients are still checked and the ranks still agree, so no
    // rank steps on non-finite gradients (there is no scale to update). Unscaled already: their
    // amax is the amax of the values.
    if (amax_tracking_) {
      const NonFiniteAndAmax local = CheckAndAmax(list);
      std::array<double, 2> values{local.FoundNonFinite ? 1.0 : 0.0, static_cast<double>(local.Amax)};
      fsdp_.ProcessGroup().AllReduceHost(values, ReduceOp::Max);
      last_amax_ = static_cast<float>(values[1]);
      return values[0] > 0.0;
    }
    const bool local = HasNonFinite(list);
    return fsdp_.ProcessGroup().AllReduceHost(local ? 1.0 : 0.0, ReduceOp::Max) > 0.0;
  }
  owner_->Place(list, "gradients");
  owner_->ClearRecord();
  owner_->ClearAmax();
  owner_->Unscale(list, {}, {});  // in place, times InverseScale(scale) read where the state lives
  agreed_amax_.reset();
  const bool overflow = Agree();
  if (amax_tracking_) {
    last_amax_ = agreed_amax_;
  }
  return overflow;
}

void FSDPMixedPrecisionManager::SetAmaxTracking(bool on) {
  owner_->SetAmaxTracking(on);
  amax_tracking_ = on;
  last_amax_.reset();
}

bool FSDPMixedPrecisionManager::AmaxTracking() const noexcept { return amax_tracking_; }

std::optional<float> FSDPMixedPrecisionManager::LastAmax() const noexcept { return last_amax_; }

float FSDPMixedPrecisionManager::CurrentLossScale() const { return owner_->Read().Scale; }
std::int64_t FSDPMixedPrecisionManager::StepsSinceOverflow() const { return owner_->Read().StepsSinceLastOverflow; }
ScaleState FSDPMixedPrecisionManager::State() const { return owner_->Read(); }
DeviceScaleState* FSDPMixedPrecisionManager::DeviceState() const noexcept { return owner_->DeviceState(); }
void FSDPMixedPrecisionManager::ResetLossScale() { owner_->Write(ScaleState::Initial(policy_)); }
const FSDPMixedPrecisionConfig& FSDPMixedPrecisionManager::Config() const noexcept { return config_; }

std::vector<std::byte> FSDPMixedPrecisionManager::StateDict() const {
  mlframework::detail::BlobWriter writer(kManagerKind, kManagerVersion);
  writer.ScaleStateFields(owner_->Read());
  return writer.Finish();
}

void FSDPMixedPrecisionManager::LoadStateDict(std::span<const std::byte> state) {
  mlframework::detail::BlobReader reader(state, kManagerKind, kManagerVersion);
  const ScaleState loaded = reader.ScaleStateFields();
  reader.ExpectEnd();
  if (loaded.Scale < policy_.MinScale || loaded.Scale > policy_.MaxScale) {
    reader.Fail("scale " + std::to_string(loaded.Scale) + " is outside [MinLossScale, MaxLossScale]");
  }
  owner_->Write(loaded);
}

}  // namespace mlframework::distributed::fsdp
