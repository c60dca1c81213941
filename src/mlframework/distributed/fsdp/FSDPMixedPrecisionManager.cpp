// Spec 002: FSDPMixedPrecisionManager.
#include <mlframework/distributed/fsdp/FSDPMixedPrecisionManager.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>

#include "mlframework/core/ObserverList.hpp"
#include "mlframework/core/ScaleStateOwner.hpp"
#include "mlframework/core/StateBlob.hpp"
#include "mlframework/core/Validation.hpp"
#include "mlframework/distributed/Agreement.hpp"

namespace mlframework::distributed::fsdp {

namespace {
constexpr char kManagerKind[] = "distributed.fsdp.FSDPMixedPrecisionManager";
// Version 2: the scale state and the step index. Version 1 (still read): the scale state.
constexpr std::uint16_t kManagerVersion = 2;
constexpr std::uint16_t kManagerVersion1 = 1;

// Null entries are skipped, as the spec's loop does; an FP8 entry is an ArgumentError (loss scaling refuses FP8).
std::vector<TensorPtr> NonNull(const GradientMap& gradients) {
  std::vector<TensorPtr> list;
  list.reserve(gradients.size());
  for (const auto& [name, gradient] : gradients) {
    if (gradient) {
      mlframework::detail::RequireLossScalableGradient(*gradient, name);
      list.push_back(gradient);
    }
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

bool FSDPMixedPrecisionManager::Agree(const distributed::detail::LocalCheck& local, const char* call) {
  // MAX over ranks before the scale changes: every rank takes the same decision.
  IProcessGroup& group = fsdp_.ProcessGroup();
  if (group.BackendName() != "nccl") {
    // MPI and local groups reduce host values, all in one all-reduce: the local flag (read
    // once), the amax while tracked, this rank's refusal of its arguments (so that every rank
    // throws when one does, before any scale changes) and its report opt-in (so that one rank's
    // observer is enough).
    const bool ok = !local.Failed();
    std::array<double, 5> values{ok && owner_->Recorded() ? 1.0 : 0.0,
                                 ok && owner_->AmaxTracking() ? static_cast<double>(owner_->Amax()) : 0.0, local.Kind(),
                                 local.Rank(), Reporting() ? 1.0 : 0.0};
    group.AllReduceHost(values, ReduceOp::Max);
    local.Throw(values[2], values[3], call);
    const bool overflow = values[0] > 0.0;
    owner_->Update(overflow);
    if (owner_->AmaxTracking()) agreed_amax_ = static_cast<float>(values[1]);
    agreed_reporting_ = values[4] > 0.0;
    return overflow;
  }
  // NCCL: the arguments were checked on this rank only (see the class notes: no host
  // all-reduce runs on this path, so every rank must pass alike).
  local.Throw(0.0, 0.0, call);
  // flag -> one-element tensor where the state lives -> AllReduce MAX there -> flag, then
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
  std::vector<TensorPtr> list;
  // Refusals carried into the agreement, so a rank that refuses does not leave the others in it.
  const distributed::detail::LocalCheck local(fsdp_.ProcessGroup(), [&] {
    list = NonNull(gradients);
    owner_->Place(list, "gradients");
  });
  agreed_reporting_.reset();
  const float old_scale = owner_->Read().Scale;
  if (!local.Failed()) {
    owner_->ClearRecord();
    owner_->Check(list);
  }
  return FinishStep(gradients, Agree(local, "FSDPMixedPrecisionManager::CheckOverflow"), old_scale);
}

bool FSDPMixedPrecisionManager::UnscaleAndCheckOverflow(const GradientMap& gradients) {
  static constexpr char kCall[] = "FSDPMixedPrecisionManager::UnscaleAndCheckOverflow";
  std::vector<TensorPtr> list;
  const distributed::detail::LocalCheck local(fsdp_.ProcessGroup(), [&] {
    list = NonNull(gradients);
    if (config_.UseLossScaling) owner_->Place(list, "gradients");
  });
  agreed_reporting_.reset();
  if (!config_.UseLossScaling) {
    // Nothing to unscale, but the gradients are still checked and the ranks still agree, so no
    // rank steps on non-finite gradients (there is no scale to update). Unscaled already: their
    // amax is the amax of the values. One host all-reduce MAX carries the flag, the amax, this
    // rank's refusal and its report opt-in.
    NonFiniteAndAmax scan{};
    if (!local.Failed()) {
      if (amax_tracking_) {
        scan = CheckAndAmax(list);
      } else {
        scan.FoundNonFinite = HasNonFinite(list);
      }
    }
    std::array<double, 5> values{scan.FoundNonFinite ? 1.0 : 0.0, static_cast<double>(scan.Amax), local.Kind(),
                                 local.Rank(), Reporting() ? 1.0 : 0.0};
    fsdp_.ProcessGroup().AllReduceHost(values, ReduceOp::Max);
    local.Throw(values[2], values[3], kCall);
    agreed_reporting_ = values[4] > 0.0;
    if (amax_tracking_) last_amax_ = static_cast<float>(values[1]);
    return FinishStep(gradients, values[0] > 0.0, 1.0f, amax_tracking_ ? last_amax_ : std::nullopt);
  }
  const float old_scale = owner_->Read().Scale;
  if (!local.Failed()) {
    owner_->ClearRecord();
    owner_->ClearAmax();
    owner_->Unscale(list, {}, {});  // in place, times InverseScale(scale) read where the state lives
  }
  const std::optional<float> amax_before = agreed_amax_;
  agreed_amax_.reset();
  bool overflow = false;
  try {
    overflow = Agree(local, kCall);
  } catch (...) {
    agreed_amax_ = amax_before;
    throw;
  }
  if (amax_tracking_) {
    last_amax_ = agreed_amax_;
  }
  return FinishStep(gradients, overflow, old_scale, amax_tracking_ ? last_amax_ : std::nullopt);
}

OverflowReport FSDPMixedPrecisionManager::AgreedReport(const GradientMap& gradients, float scale) const {
  std::vector<TensorPtr> present;
  present.reserve(gradients.size());
  for (const auto& entry : gradients) {
    if (entry.second) present.push_back(entry.second);
  }
  const std::vector<NonFiniteScan> scans = ScanNonFinite(present);
  IProcessGroup& group = fsdp_.ProcessGroup();
  const std::size_t n = gradients.size();
  const auto world = static_cast<std::size_t>(group.WorldSize());
  // Fixed-size arrays, the same layout on every rank: SUM of the counts (total, NaN, +Inf, -Inf);
  // MAX of the three kinds, of "rank r saw one" and of the negated first index (MAX of -i is MIN
  // of i; -2^53 for none).
  constexpr double kNoIndex = -9007199254740992.0;
  std::vector<double> counts(4 * n, 0.0);
  std::vector<double> maxima(4 * n + world, 0.0);
  std::fill(maxima.begin() + static_cast<std::ptrdiff_t>(3 * n), maxima.begin() + static_cast<std::ptrdiff_t>(4 * n),
            kNoIndex);
  bool local = false;
  std::size_t i = 0;
  std::size_t k = 0;
  for (const auto& entry : gradients) {
    if (entry.second) {
      const NonFiniteScan& scan = scans[k++];
      if (scan.Count != 0) {
        local = true;
        counts[i] = static_cast<double>(scan.Count);
        counts[n + i] = static_cast<double>(scan.NaNCount);
        counts[2 * n + i] = static_cast<double>(scan.PosInfCount);
        counts[3 * n + i] = static_cast<double>(scan.NegInfCount);
        maxima[i] = scan.HasNaN ? 1.0 : 0.0;
        maxima[n + i] = scan.HasPosInf ? 1.0 : 0.0;
        maxima[2 * n + i] = scan.HasNegInf ? 1.0 : 0.0;
        maxima[3 * n + i] = -static_cast<double>(scan.FirstIndex);
      }
    }
    ++i;
  }
  if (local) {
    maxima[4 * n + static_cast<std::size_t>(group.Rank())] = 1.0;
  }
  group.AllReduceHost(counts, ReduceOp::Sum);
  group.AllReduceHost(maxima, ReduceOp::Max);

  OverflowReport report;
  report.Step = steps_;
  report.LossScale = scale;
  i = 0;
  for (const auto& entry : gradients) {
    if (counts[i] > 0.0) {
      report.Tensors.push_back(TensorOverflow{.Name = entry.first,
                                              .NonFiniteCount = static_cast<std::uint64_t>(counts[i]),
                                              .FirstIndex = static_cast<std::uint64_t>(-maxima[3 * n + i]),
                                              .HasNaN = maxima[i] > 0.0,
                                              .HasPosInf = maxima[n + i] > 0.0,
                                              .HasNegInf = maxima[2 * n + i] > 0.0,
                                              .NaNCount = static_cast<std::uint64_t>(counts[n + i]),
                                              .PosInfCount = static_cast<std::uint64_t>(counts[2 * n + i]),
                                              .NegInfCount = static_cast<std::uint64_t>(counts[3 * n + i])});
    }
    ++i;
  }
  for (std::size_t r = 0; r < world; ++r) {
    if (maxima[4 * n + r] > 0.0) report.Ranks.push_back(static_cast<int>(r));
  }
  report.OrderBy(gradient_order_);
  return report;
}

bool FSDPMixedPrecisionManager::Reporting() const noexcept { return reports_ || !observers_.empty(); }

bool FSDPMixedPrecisionManager::FinishStep(const GradientMap& gradients, bool overflow, float old_scale,
                                           std::optional<float> amax) {
  if (overflow) {
    // Reports when any rank opted in, agreed with the flag (host agreements); NCCL agrees the
    // flag on the device only, so there every rank opts in alike.
    const bool reporting = agreed_reporting_.value_or(Reporting());
    if (reporting) last_overflow_ = AgreedReport(gradients, old_scale);
  }
  const std::int64_t step = steps_++;
  if (!observers_.empty()) {
    mlframework::detail::StepNotice notice;
    notice.Event =
        StepEvent{.Step = step,
                  .LossScale = old_scale,
                  .NewLossScale = config_.UseLossScaling ? owner_->Read().Scale : old_scale,
                  .Skipped = overflow,
                  .GradientNorm = std::nullopt,
                  .GradientAmax = amax,
                  .Overflow = overflow && last_overflow_ ? &*last_overflow_ : nullptr,
                  .MinLossScale = config_.UseLossScaling ? std::optional<float>(config_.MinLossScale) : std::nullopt};
    mlframework::detail::NotifyObservers(observers_, notice);
  }
  return overflow;
}

void FSDPMixedPrecisionManager::SetOverflowReports(bool enabled) noexcept { reports_ = enabled; }
bool FSDPMixedPrecisionManager::OverflowReports() const noexcept { return reports_; }

void FSDPMixedPrecisionManager::AddObserver(std::shared_ptr<ITrainingObserver> observer) {
  mlframework::detail::AddObserver(observers_, std::move(observer));
}

bool FSDPMixedPrecisionManager::RemoveObserver(const std::shared_ptr<ITrainingObserver>& observer) {
  return mlframework::detail::RemoveObserver(observers_, observer);
}

void FSDPMixedPrecisionManager::SetAmaxTracking(bool on) {
  owner_->SetAmaxTracking(on);
  amax_tracking_ = on;
  last_amax_.reset();
}

bool FSDPMixedPrecisionManager::AmaxTracking() const noexcept { return amax_tracking_; }

std::optional<float> FSDPMixedPrecisionManager::LastAmax() const noexcept { return last_amax_; }

float FSDPMixedPrecisionManager::CurrentScale() const { return owner_->Read().Scale; }
std::int64_t FSDPMixedPrecisionManager::StepsSinceLastOverflow() const { return owner_->Read().StepsSinceLastOverflow; }
ScaleState FSDPMixedPrecisionManager::State() const { return owner_->Read(); }
DeviceScaleState* FSDPMixedPrecisionManager::DeviceState() const noexcept { return owner_->DeviceState(); }
void FSDPMixedPrecisionManager::ResetLossScale() {
  owner_->Write(ScaleState::Initial(policy_));
  last_overflow_.reset();
}
const FSDPMixedPrecisionConfig& FSDPMixedPrecisionManager::Config() const noexcept { return config_; }

std::vector<std::byte> FSDPMixedPrecisionManager::StateDict() const {
  mlframework::detail::BlobWriter writer(kManagerKind, kManagerVersion);
  writer.ScaleStateFields(owner_->Read());
  writer.I64(steps_);
  return writer.Finish();
}

void FSDPMixedPrecisionManager::LoadStateDict(std::span<const std::byte> state) {
  std::uint16_t version = 0;
  mlframework::detail::BlobReader reader =
      mlframework::detail::OpenBlobVersion(state, kManagerKind, {kManagerVersion, kManagerVersion1}, version);
  const ScaleState loaded = reader.ScaleStateFields();
  const std::int64_t steps = version == kManagerVersion ? reader.Count("step index") : steps_;
  reader.ExpectEnd();
  if (loaded.Scale < policy_.MinScale || loaded.Scale > policy_.MaxScale) {
    reader.Fail("scale " + std::to_string(loaded.Scale) + " is outside [MinLossScale, MaxLossScale]");
  }
  owner_->Write(loaded);
  steps_ = steps;
}

void FSDPMixedPrecisionManager::SetStepIndex(std::int64_t step) {
  mlframework::detail::RequireStepIndex(step);
  steps_ = step;
}

void FSDPMixedPrecisionManager::SetGradientOrder(std::vector<std::string> names) { gradient_order_ = std::move(names); }

}  // namespace mlframework::distributed::fsdp
