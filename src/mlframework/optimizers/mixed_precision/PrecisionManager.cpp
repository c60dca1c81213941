#include <mlframework/optimizers/mixed_precision/PrecisionManager.hpp>

#include <optional>
#include <string>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>

#include "mlframework/core/StateBlob.hpp"

namespace mlframework::optimizers::mixed_precision {

namespace {

constexpr const char* kBlobKind = "optimizers.mixed_precision.PrecisionManager";
// Version 2: the flag, the fallback step, the overflows at the minimum scale and the scaler
// state last seen. Version 1 (still read): the precision and the flag.
constexpr std::uint16_t kBlobVersion = 2;
constexpr std::uint16_t kBlobVersion1 = 1;

// The tensors of @p map converted to @p dtype in one fused cast, under the same names.
GradientMap CastMap(const GradientMap& map, DataType dtype) {
  const std::vector<TensorPtr> list = TensorList(map);
  const std::vector<TensorPtr> cast = Cast(list, dtype);
  GradientMap result;
  std::size_t i = 0;
  for (const auto& entry : map) {
    result.emplace_hint(result.end(), entry.first, cast[i++]);
  }
  return result;
}

// Of @p overflows backed off one after another from @p scale under @p policy (Hysteresis 1, as
// every mixed-precision policy), how many happened with the scale already at MinScale. Each
// overflow above the minimum lowers the scale, so the loop runs until the scale reaches it (or,
// for a backoff too close to 1 to lower a float, until it stops moving), never past @p overflows.
std::int64_t OverflowsAtMin(float scale, std::int64_t overflows, const ScalePolicy& policy) {
  for (std::int64_t i = 0; i < overflows; ++i) {
    if (scale <= policy.MinScale) {
      return overflows - i;
    }
    const float reduced = scale * policy.BackoffFactor;
    const float next = reduced > policy.MinScale ? reduced : policy.MinScale;
    if (next == scale) {
      return 0;
    }
    scale = next;
  }
  return 0;
}

}  // namespace

PrecisionManager::PrecisionManager(const MixedPrecisionOptions& options)
    : options_((options.Validate(), options)),
      target_(options_.Precision),
      seen_(ScaleState::Initial(options_.ToScalePolicy())) {}

PrecisionManager::PrecisionManager() : PrecisionManager(MixedPrecisionOptions::ForFP16()) {}

GradientMap PrecisionManager::ConvertToFP32(const GradientMap& gradients) const {
  TensorList(gradients);  // null entries are an error before any work
  GradientMap result;
  GradientMap low;
  for (const auto& [name, tensor] : gradients) {
    if (tensor->GetDataType() == DataType::Float32) {
      result.emplace(name, tensor);
    } else {
      low.emplace(name, tensor);
    }
  }
  result.merge(CastMap(low, DataType::Float32));
  return result;
}

GradientMap PrecisionManager::ConvertToTargetPrecision(const GradientMap& tensors) const {
  return CastMap(tensors, target_);
}

void PrecisionManager::InitializeMasterWeights(const GradientMap& parameters) {
  GradientMap master = CastMap(parameters, DataType::Float32);  // always copies, so master weights are independent
  master_ = std::move(master);
}

std::vector<TensorPtr> PrecisionManager::MatchingMasterWeights(const GradientMap& model_parameters) const {
  TensorList(model_parameters);  // null entries are an error before any other check
  if (model_parameters.size() != master_.size()) {
    throw ArgumentError("model_parameters", "has " + std::to_string(model_parameters.size()) +
                                                " tensors but there are " + std::to_string(master_.size()) +
                                                " master weights");
  }
  std::vector<TensorPtr> master;
  master.reserve(master_.size());
  auto it = model_parameters.begin();
  for (const auto& [name, weight] : master_) {
    if (it->first != name) {
      throw ArgumentError("model_parameters",
                          "has no tensor \"" + name + "\" (found \"" + it->first + "\" in its place)");
    }
    if (it->second->GetShape() != weight->GetShape()) {
      throw ArgumentError("model_parameters[\"" + name + "\"]", "shape " + ToString(it->second->GetShape()) +
                                                                    " differs from the master weight's " +
                                                                    ToString(weight->GetShape()));
    }
    master.push_back(weight);
    ++it;
  }
  return master;
}

void PrecisionManager::CopyMasterToModel(const GradientMap& model_parameters) const {
  if (master_.empty()) {
    throw InvalidOperationError(
        "PrecisionManager::CopyMasterToModel needs master weights: call InitializeMasterWeights first");
  }
  const std::vector<TensorPtr> master = MatchingMasterWeights(model_parameters);
  CastInto(master, TensorList(model_parameters));
}

GradientMap PrecisionManager::FP32Parameters(const GradientMap& model_parameters) const {
  if (master_.empty()) {
    return CastMap(model_parameters, DataType::Float32);
  }
  MatchingMasterWeights(model_parameters);
  return CastMap(master_, DataType::Float32);  // copies: the caller's model owns them
}

void PrecisionManager::CountOverflowsAtMin(const ScaleState& now, const ScalePolicy& policy) {
  const std::int64_t run = now.ConsecutiveOverflows;
  if (seen_ && now == *seen_) {
    return;  // no update since the last look (a second call for the same step)
  }
  if (run == 0) {
    overflows_at_min_ = 0;
  } else if (seen_ && now.TotalSteps > seen_->TotalSteps && run >= now.TotalSteps - seen_->TotalSteps) {
    // Every update since the last look overflowed: the run goes on from the scale seen then.
    const std::int64_t base = seen_->ConsecutiveOverflows > 0 ? overflows_at_min_ : 0;
    overflows_at_min_ = base + OverflowsAtMin(seen_->Scale, now.TotalSteps - seen_->TotalSteps, policy);
  } else if (now.TotalSteps == run) {
    // Every update since the initial state (a new or Reset() scaler) overflowed.
    overflows_at_min_ = OverflowsAtMin(policy.InitialScale, run, policy);
  } else {
    // The run began at a scale this manager did not see; it was at most MaxScale.
    overflows_at_min_ = OverflowsAtMin(policy.MaxScale, run, policy);
  }
  seen_ = now;
}

bool PrecisionManager::CheckFallback(DynamicLossScaler& scaler) {
  if (fallen_back_ || !options_.EnableAutoFallback || target_ == DataType::Float32) {
    return false;
  }
  const ScaleState now = scaler.State();
  CountOverflowsAtMin(now, scaler.Policy());
  if (overflows_at_min_ < options_.MaxConsecutiveOverflows) {
    return false;
  }
  scaler.StopScaling();  // first: it writes a device-resident state, which may fail; then commit here
  target_ = DataType::Float32;
  fallen_back_ = true;
  fallback_step_ = now.TotalSteps;
  return true;
}

std::vector<std::byte> PrecisionManager::StateDict() const {
  mlframework::detail::BlobWriter writer(kBlobKind, kBlobVersion);
  writer.U8(static_cast<std::uint8_t>(options_.Precision));
  writer.U8(fallen_back_ ? 1 : 0);
  writer.I64(fallback_step_);
  writer.I64(overflows_at_min_);
  writer.U8(seen_ ? 1 : 0);
  writer.ScaleStateFields(seen_.value_or(ScaleState{}));
  return writer.Finish();
}

void PrecisionManager::LoadStateDict(std::span<const std::byte> state) {
  std::uint16_t version = 0;
  mlframework::detail::BlobReader reader =
      mlframework::detail::OpenBlobVersion(state, kBlobKind, {kBlobVersion, kBlobVersion1}, version);
  const auto precision = static_cast<DataType>(reader.U8());
  const bool fallen_back = reader.Flag("stored fallback");
  std::int64_t fallback_step = 0;
  std::int64_t overflows_at_min = 0;
  std::optional<ScaleState> seen;
  if (version == kBlobVersion) {
    fallback_step = reader.Count("stored fallback step");
    overflows_at_min = reader.Count("stored overflows at the minimum scale");
    const bool has_seen = reader.Flag("stored seen-state");
    const ScaleState fields = reader.ScaleStateFields();
    if (has_seen) {
      seen = fields;
    }
    if (!fallen_back && fallback_step != 0) {
      reader.Fail("stored fallback step " + std::to_string(fallback_step) + " without a fallback");
    }
    if (has_seen && overflows_at_min > fields.ConsecutiveOverflows) {
      reader.Fail("stored overflows at the minimum scale " + std::to_string(overflows_at_min) +
                  " exceed the overflows in a row " + std::to_string(fields.ConsecutiveOverflows));
    }
  }
  reader.ExpectEnd();
  if (precision != options_.Precision) {
    reader.Fail("was saved for Precision " + std::string(ToString(precision)) + " but this manager's is " +
                std::string(ToString(options_.Precision)));
  }
  // Commit only after every check passed.
  fallen_back_ = fallen_back;
  target_ = fallen_back_ ? DataType::Float32 : options_.Precision;
  fallback_step_ = fallback_step;
  overflows_at_min_ = overflows_at_min;
  seen_ = seen;
}

}  // namespace mlframework::optimizers::mixed_precision
