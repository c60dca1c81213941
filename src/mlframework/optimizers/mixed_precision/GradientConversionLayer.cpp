#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/ObserverList.hpp"
#include "mlframework/core/StateBlob.hpp"
#include "mlframework/core/Validation.hpp"
#include "mlframework/optimizers/mixed_precision/CSharpFormat.hpp"

namespace mlframework::optimizers::mixed_precision {

namespace {

constexpr const char* kLayerKind = "optimizers.mixed_precision.GradientConversionLayer";
// Version 2: version 1 and the step index. Version 1 (still read): no step index.
constexpr std::uint16_t kLayerVersion = 2;
constexpr std::uint16_t kLayerVersion1 = 1;

// Spec 003's epsilon in the clip coefficient, so a norm at the limit never divides by zero.
constexpr float kClipEpsilon = 1e-6f;

template <typename T>
std::shared_ptr<T> NonNull(std::shared_ptr<T> pointer, const char* name) {
  if (!pointer) {
    throw ArgumentNullError(name);
  }
  return pointer;
}

}  // namespace

std::string GradientProcessingStats::ToString() const {
  std::string text = "LossScale: " + detail::FormatFixed(LossScale, 2) +
                     ", LastGradNorm: " + detail::FormatFixed(LastGradientNorm, 4) +
                     ", ClipCount: " + std::to_string(ClipCount) +
                     ", ClippingEnabled: " + detail::FormatBool(ClippingEnabled) +
                     ", MaxGradNorm: " + detail::FormatFixed(MaxGradNorm, 2);
  if (FellBackToFP32) {
    text += ", Fell back to FP32";
  }
  return text;
}

GradientConversionLayer::GradientConversionLayer(const MixedPrecisionOptions& options,
                                                 std::shared_ptr<DynamicLossScaler> lossScaler,
                                                 std::shared_ptr<PrecisionManager> precisionManager)
    : loss_scaler_(NonNull(std::move(lossScaler), "lossScaler")),
      precision_manager_(NonNull(std::move(precisionManager), "precisionManager")) {
  options.Validate();
  options_ = options;
}

GradientConversionLayer::GradientConversionLayer(const MixedPrecisionOptions& options)
    : GradientConversionLayer(options, std::make_shared<DynamicLossScaler>(options),
                              std::make_shared<PrecisionManager>(options)) {}

GradientConversionLayer::GradientConversionLayer() : GradientConversionLayer(MixedPrecisionOptions::ForFP16()) {}

DynamicLossScaler& GradientConversionLayer::Scaler() const {
  return mlframework::detail::Live(loss_scaler_, "GradientConversionLayer");
}

PrecisionManager& GradientConversionLayer::Manager() const {
  return mlframework::detail::Live(precision_manager_, "GradientConversionLayer");
}

float GradientConversionLayer::CurrentScale() const { return Scaler().CurrentScale(); }

const std::shared_ptr<DynamicLossScaler>& GradientConversionLayer::LossScaler() const {
  (void)Scaler();  // InvalidOperationError once moved from, rather than a null pointer
  return loss_scaler_;
}

const std::shared_ptr<PrecisionManager>& GradientConversionLayer::Precision() const {
  (void)Manager();
  return precision_manager_;
}

bool GradientConversionLayer::ClippingActive() const noexcept {
  return options_.EnableGradientClipping && options_.MaxGradNorm > 0.0f;
}

double GradientConversionLayer::ClipCoefficient(double sum_of_squares, bool& clipped) {
  const double norm = std::sqrt(sum_of_squares);
  last_gradient_norm_ = static_cast<float>(norm);  // +inf when the norm exceeds FLT_MAX
  // The sum is FP64, so only an Inf or NaN gradient (one a disabled scaler did not check) makes
  // the norm non-finite. No coefficient makes such gradients finite, and MaxGradNorm / inf = 0
  // would turn an Inf into NaN and zero every other gradient: they are not clipped.
  clipped = std::isfinite(norm) && norm > static_cast<double>(options_.MaxGradNorm);
  if (!clipped) {
    return 1.0;
  }
  ++clip_count_;
  if (std::isfinite(last_gradient_norm_)) {
    return options_.MaxGradNorm / (last_gradient_norm_ + kClipEpsilon);  // spec 003's FP32 formula
  }
  // A finite norm above FLT_MAX (finite FP32/BF16 gradients near the top of their range): in FP32
  // the coefficient would be MaxGradNorm / inf = 0 and zero every gradient.
  return static_cast<double>(options_.MaxGradNorm) / (norm + static_cast<double>(kClipEpsilon));
}

TensorPtr GradientConversionLayer::ReusableOutput(const std::string& name, const ITensor& like) const {
  for (const GradientMap* kept : {&output_buffers_, &spare_buffers_}) {
    const auto cached = kept->find(name);
    // Reuse only a buffer nobody but this layer still holds, so returned gradients are never overwritten.
    if (cached != kept->end() && cached->second.use_count() == 1 && cached->second->GetShape() == like.GetShape() &&
        cached->second->GetDevice() == like.GetDevice() && cached->second->Backend() == like.Backend()) {
      return cached->second;
    }
  }
  return nullptr;
}

void GradientConversionLayer::KeepOutputBuffers(GradientMap buffers) {
  // The last call's buffers this call did not take become the spares (each tensor is kept in one
  // map only, so the use count above stays 1 for a buffer nobody else holds).
  GradientMap spare;
  for (auto& [name, tensor] : output_buffers_) {
    const auto now = buffers.find(name);
    if (now == buffers.end() || now->second != tensor) {
      spare.emplace_hint(spare.end(), name, std::move(tensor));
    }
  }
  spare_buffers_ = std::move(spare);
  output_buffers_ = std::move(buffers);
}

void GradientConversionLayer::AllocateOutputs(std::span<const TensorPtr> low_src, std::span<TensorPtr> low_dst) {
  std::vector<TensorPtr> like;
  for (std::size_t i = 0; i < low_src.size(); ++i) {
    if (!low_dst[i]) {
      like.push_back(low_src[i]);
    }
  }
  // Made by the gradients' scaling backend: on the host one contiguous FP32 buffer per device,
  // so pass 2 streams its output like one flat tensor however many small gradients there are.
  std::vector<TensorPtr> made = Float32OutputsLike(like);
  std::size_t next = 0;
  for (TensorPtr& output : low_dst) {
    if (!output) {
      output = std::move(made[next++]);
    }
  }
}

GradientProcessingResult GradientConversionLayer::ProcessGradients(const GradientMap& gradients) {
  const std::vector<TensorPtr> list =
      mlframework::detail::LossScalingList(gradients);  // null or FP8 entries: error, nothing changed
  DynamicLossScaler& scaler = Scaler();
  const bool scaling = scaler.IsEnabled();
  // After the fallback to FP32 the scale is 1 but the checks go on: a non-finite gradient must
  // never reach the optimizer while overflow checking is configured.
  const bool checking = scaler.IsChecking();
  const bool clipping = ClippingActive();
  if (checking) {
    // The scaler's state goes where the gradients' backend keeps it (ArgumentError for a list
    // that mixes a device with anything else, before anything is written).
    scaler.MoveStateTo(list);
  }

  // Outputs first: if an allocation fails, the scaler and the counters have not moved.
  GradientMap outputs;
  GradientMap buffers;
  std::vector<std::string> low_names;
  std::vector<TensorPtr> low_src;
  std::vector<TensorPtr> low_dst;
  std::vector<TensorPtr> fp32;
  std::unordered_set<const ITensor*> fp32_seen;
  for (const auto& [name, tensor] : gradients) {
    if (tensor->GetDataType() == DataType::Float32) {
      // In place: a tensor listed under two names must still be scaled once.
      if (fp32_seen.insert(tensor.get()).second) {
        fp32.push_back(tensor);
      }
      outputs.emplace_hint(outputs.end(), name, tensor);
      continue;
    }
    low_names.push_back(name);
    low_src.push_back(tensor);
    low_dst.push_back(ReusableOutput(name, *tensor));
  }
  AllocateOutputs(low_src, low_dst);
  for (std::size_t i = 0; i < low_names.size(); ++i) {
    buffers.emplace_hint(buffers.end(), low_names[i], low_dst[i]);
    outputs.emplace(low_names[i], low_dst[i]);
  }

  // The scale the gradients were produced with, before the update may grow it (on a device the
  // copy read at the previous step: no wait).
  const float old_scale = scaler.CurrentScale();
  const double inverse = scaling ? 1.0 / static_cast<double>(old_scale) : 1.0;
  bool skip = false;
  double sum_of_squares = 0.0;
  bool written = false;
  std::optional<float> amax;
  if (clipping) {
    // Pass 1 (step 1 and the norm of step 4): one read; the clip coefficient needs the norm on
    // the host, so the flag comes with it and the update takes that decision.
    const NonFiniteAndNorm measured = CheckAndSumSquares(list, static_cast<float>(inverse));
    skip = scaler.UpdateScale(checking && measured.FoundNonFinite);
    sum_of_squares = measured.SumOfSquares;
  } else if (checking) {
    // Pass 2 of the 16-bit gradients before the update (which may grow the scale) doubles as
    // their check (see the header); FP32 inputs are only checked, so a skipped step keeps them.
    scaler.ClearRecordedOverflow();
    scaler.UnscaleAndRecordOverflow({}, low_src, low_dst);
    if (amax_tracking_) {
      // The FP32 check with the amax of the (scaled) values; the record takes their flag through
      // the plain check, run again only when they overflowed.
      const NonFiniteAndAmax fp32_checked = fp32.empty() ? NonFiniteAndAmax{} : CheckAndAmax(fp32);
      if (fp32_checked.FoundNonFinite) {
        scaler.RecordOverflow(fp32);
      }
      // Rounding is monotonic: max|x| x (1/scale) is the largest |x x (1/scale)| the unscale writes.
      amax = std::max(scaler.RecordedAmax().value_or(0.0f), fp32_checked.Amax * static_cast<float>(inverse));
    } else {
      scaler.RecordOverflow(fp32);
    }
    // A scale below 1 multiplies by more than 1: a finite FP32 input can become Inf in the
    // in-place unscale after its check. Rounding is monotonic, so the largest |x| x (1/scale)
    // says whether any does (one more read, only for scales below 1).
    bool fp32_overflows_unscaled = false;
    if (inverse > 1.0 && !fp32.empty()) {
      const float largest = CheckAndAmax(fp32).Amax * static_cast<float>(inverse);
      fp32_overflows_unscaled = !std::isfinite(largest);
    }
    if (fp32_overflows_unscaled) {
      scaler.ClearRecordedOverflow();
      scaler.UpdateScale(true);
    } else {
      scaler.UpdateScaleFromRecord();
    }
    // The one read of the step: an overflowed update leaves ConsecutiveOverflows >= 1, a clean
    // one 0; the fallback check below reuses this read.
    skip = scaler.ConsecutiveOverflows() > 0;
    written = true;
  }

  // The report reads what the check read: the values pass 2 wrote (and the FP32 inputs), or the
  // inputs pass 1 measured (pass 2's outputs may hold Inf where a finite input times the inverse
  // scale overflowed, so they, not the inputs, say why the step is skipped).
  // On a device only for observers: the scan waits for the device (one synchronisation per step
  // is the layer's promise without them).
  std::optional<OverflowReport> report;
  if (skip && (!observers_.empty() || mlframework::detail::ReportCostsNoWait(list))) {
    report = OverflowReport::FromGradients(written ? outputs : gradients, steps_, old_scale);
    report->OrderBy(gradient_order_);
  }

  if (amax_tracking_) {
    last_amax_ = amax;
  }
  // Step 2's fallback rule (spec: a disabled scaler never reports an overflow). It fires only on
  // an overflowed step, so the step on which it happens is skipped.
  const bool fell_back = Manager().CheckFallback(scaler);
  KeepOutputBuffers(std::move(buffers));
  const std::int64_t step = steps_++;
  // Observers last, with everything committed (ITrainingObserver's notes); nothing is built
  // without them.
  const auto notify = [&](std::optional<float> norm, bool clipped, float coefficient) {
    mlframework::detail::StepNotice notice;
    notice.Event =
        StepEvent{.Step = step,
                  .LossScale = old_scale,
                  .NewLossScale = scaler.CurrentScale(),
                  .Skipped = skip,
                  .GradientNorm = norm,
                  .GradientAmax = amax_tracking_ ? last_amax_ : std::nullopt,
                  .Overflow = skip && last_overflow_ ? &*last_overflow_ : nullptr,
                  .MinLossScale = scaling ? std::optional<float>(scaler.Options().MinLossScale) : std::nullopt};
    notice.FellBack = fell_back;
    notice.Clipped = clipped;
    notice.NormBeforeClipping = norm.value_or(0.0f);
    notice.ClipCoefficient = coefficient;
    mlframework::detail::NotifyObservers(observers_, notice);
  };
  if (skip) {
    if (report) {
      last_overflow_ = std::move(report);
    }
    if (!observers_.empty()) {
      notify(std::nullopt, false, 1.0f);
    }
    return {.Gradients = GradientMap{}, .ShouldSkip = true, .FellBackToFP32 = fell_back};
  }

  // Steps 3-5 in pass 2: unscale x clip, written once as FP32.
  double factor = inverse;
  bool clipped = false;
  float coefficient = 1.0f;
  if (clipping) {
    const double exact = ClipCoefficient(sum_of_squares, clipped);
    coefficient = static_cast<float>(exact);
    factor *= exact;
  }
  const auto write_factor = static_cast<float>(factor);
  if (amax_tracking_ && clipping) {
    // Pass 1 measured the norm, so the amax comes from the pass that writes the clipped FP32
    // gradients: their amax over the clip coefficient is the unscaled gradients' (to rounding).
    float written_amax = 0.0f;
    if (!low_src.empty()) {
      written_amax = CastIntoAndAmax(low_src, low_dst, write_factor).Amax;
    }
    if (!fp32.empty()) {
      const NonFiniteAndAmax in_place =
          write_factor != 1.0f ? UnscaleCheckAndAmax(fp32, write_factor) : CheckAndAmax(fp32);
      written_amax = std::max(written_amax, in_place.Amax);
    }
    last_amax_ = written_amax / coefficient;
  } else {
    if (!written && !low_src.empty()) {
      CastInto(low_src, low_dst, write_factor);
    }
    if (!fp32.empty() && write_factor != 1.0f) {
      ScaleInPlace(fp32, write_factor);
    }
  }
  if (!observers_.empty()) {
    notify(clipping ? std::optional(last_gradient_norm_) : std::nullopt, clipped, coefficient);
  }
  return {.Gradients = std::move(outputs), .ShouldSkip = false, .FellBackToFP32 = fell_back};
}

void GradientConversionLayer::AddObserver(std::shared_ptr<ITrainingObserver> observer) {
  mlframework::detail::AddObserver(observers_, std::move(observer));
}

bool GradientConversionLayer::RemoveObserver(const std::shared_ptr<ITrainingObserver>& observer) {
  return mlframework::detail::RemoveObserver(observers_, observer);
}

void GradientConversionLayer::SetAmaxTracking(bool on) {
  Scaler().SetAmaxTracking(on);
  amax_tracking_ = on;
  last_amax_.reset();
}

TensorPtr GradientConversionLayer::ScaleLoss(const TensorPtr& loss) const {
  if (!loss) {
    throw ArgumentNullError("loss");
  }
  return Scaler().ScaleLoss(loss);
}

GradientMap GradientConversionLayer::ClipGradients(const GradientMap& gradients) {
  const std::vector<TensorPtr> list = TensorList(gradients);
  if (!ClippingActive()) {
    return gradients;
  }
  std::vector<TensorPtr> clipped_tensors;
  clipped_tensors.reserve(list.size());
  for (const TensorPtr& tensor : list) {
    clipped_tensors.push_back(Zeros(tensor->GetShape(), tensor->GetDataType(), tensor->GetDevice()));
  }
  bool clipped = false;
  const auto coefficient = static_cast<float>(ClipCoefficient(SumOfSquares(list), clipped));
  if (!clipped) {
    return gradients;
  }
  CastInto(list, clipped_tensors, coefficient);
  GradientMap result;
  std::size_t i = 0;
  for (const auto& entry : gradients) {
    result.emplace_hint(result.end(), entry.first, clipped_tensors[i++]);
  }
  return result;
}

GradientProcessingStats GradientConversionLayer::GetStats() const {
  return GradientProcessingStats{.LossScale = Scaler().CurrentScale(),
                                 .ClipCount = clip_count_,
                                 .LastGradientNorm = last_gradient_norm_,
                                 .ClippingEnabled = options_.EnableGradientClipping,
                                 .MaxGradNorm = options_.MaxGradNorm,
                                 .LossScalerStats = Scaler().GetStats(),
                                 .TargetPrecision = Manager().TargetPrecision(),
                                 .FellBackToFP32 = Manager().HasFallenBack(),
                                 .FallbackStep = Manager().FallbackStep(),
                                 .OverflowsAtMinScale = Manager().OverflowsAtMinScale()};
}

void GradientConversionLayer::Reset() {
  clip_count_ = 0;
  last_gradient_norm_ = 0.0f;
  last_overflow_.reset();
  Scaler().Reset();
}

std::vector<std::byte> GradientConversionLayer::StateDict() const {
  const std::vector<std::byte> scaler = Scaler().StateDict();
  const std::vector<std::byte> manager = Manager().StateDict();
  mlframework::detail::BlobWriter writer(kLayerKind, kLayerVersion);
  writer.I64(clip_count_);
  writer.F32(last_gradient_norm_);
  writer.I64(steps_);
  writer.U64(scaler.size());
  writer.Bytes(scaler);
  writer.U64(manager.size());
  writer.Bytes(manager);
  return writer.Finish();
}

void GradientConversionLayer::LoadStateDict(std::span<const std::byte> state) {
  std::uint16_t version = 0;
  mlframework::detail::BlobReader reader =
      mlframework::detail::OpenBlobVersion(state, kLayerKind, {kLayerVersion, kLayerVersion1}, version);
  const std::int64_t clip_count = reader.I64();
  const float last_norm = reader.F32();
  const std::int64_t steps = version == kLayerVersion ? reader.Count("step index") : steps_;
  const std::span<const std::byte> scaler_blob = reader.Bytes(static_cast<std::size_t>(reader.U64()));
  const std::span<const std::byte> manager_blob = reader.Bytes(static_cast<std::size_t>(reader.U64()));
  reader.ExpectEnd();
  if (clip_count < 0) {
    reader.Fail("stored ClipCount " + std::to_string(clip_count) + " is negative");
  }
  // A norm is >= 0 (+inf above FLT_MAX), or NaN when a NaN gradient the scaler did not check
  // (a disabled scaler, ClipGradients()) was measured: StateDict() writes that too.
  if (last_norm < 0.0f) {
    reader.Fail("stored LastGradientNorm " + mlframework::detail::Show(last_norm) + " is negative");
  }
  // Decode the parts into copies first; commit only when all of them are valid.
  DynamicLossScaler scaler = Scaler();
  scaler.LoadStateDict(scaler_blob);
  PrecisionManager manager = Manager();
  manager.LoadStateDict(manager_blob);
  Scaler() = scaler;
  Manager() = std::move(manager);
  clip_count_ = clip_count;
  last_gradient_norm_ = last_norm;
  steps_ = steps;
}

void GradientConversionLayer::SetStepIndex(std::int64_t step) {
  mlframework::detail::RequireStepIndex(step);
  steps_ = step;
}

void GradientConversionLayer::SetGradientOrder(std::vector<std::string> names) { gradient_order_ = std::move(names); }

}  // namespace mlframework::optimizers::mixed_precision
