#include <mlframework/amp/GradScaler.hpp>

#include <mlframework/amp/StaticLossScaler.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/core/StateBlob.hpp"

namespace mlframework::amp {

namespace {

constexpr char kKind[] = "amp.GradScaler";
constexpr std::uint16_t kVersion = 1;
constexpr std::uint8_t kStaticKind = 0;
constexpr std::uint8_t kDynamicKind = 1;

// Same names mapping to the same tensor objects (the identity of gradients, not their values).
bool SameTensors(const GradientMap& a, const GradientMap& b) {
  if (a.size() != b.size() || a.empty()) {
    return false;
  }
  auto it = b.begin();
  for (const auto& [name, tensor] : a) {
    if (it->first != name || it->second != tensor) {
      return false;
    }
    ++it;
  }
  return true;
}

}  // namespace

struct GradScaler::Impl {
  explicit Impl(std::shared_ptr<ILossScaler> s) : scaler(std::move(s)) {
    static_scaler = dynamic_cast<StaticLossScaler*>(scaler.get());
    dynamic_scaler = dynamic_cast<DynamicLossScaler*>(scaler.get());
  }

  std::shared_ptr<ILossScaler> scaler;
  StaticLossScaler* static_scaler = nullptr;    // set when the wrapped scaler is built in
  DynamicLossScaler* dynamic_scaler = nullptr;  // set when the wrapped scaler is built in
  bool own_enabled = true;                      // GradScaler's own switch, used for custom scalers

  // The current iteration.
  std::optional<bool> found_inf;  // overflow recorded by Unscale / CheckOverflow / Step (host part)
  // The built-in dynamic scaler's record (its device flag when its state is on a device) holds the
  // rest of this iteration's found-inf: read only when a bool must be returned, never by Update().
  bool in_scaler_record = false;
  bool unscaled = false;        // Unscale (or Step) ran
  bool stepped = false;         // Step(optimizer, false) ran; waiting for Update()
  bool loss_scaled = false;     // Scale(loss) ran
  GradientMap unscaled_source;  // what was unscaled ...
  GradientMap unscaled_result;  // ... and the unscaled tensors handed out
  // Unscaled tensors of the previous iteration, kept until the next Scale(loss), to catch double unscaling.
  GradientMap previous_result;

  TensorPtr custom_scale_tensor;  // GetScaleTensor cache for custom scalers
  float custom_scale_value = 0.0f;

  bool Enabled() const { return own_enabled && scaler->Enabled(); }
  bool InIteration() const { return found_inf.has_value() || unscaled || stepped || loss_scaled; }

  void ClearIteration() {
    found_inf.reset();
    in_scaler_record = false;
    unscaled = false;
    stepped = false;
    loss_scaled = false;
    unscaled_source.clear();
    unscaled_result.clear();
  }

  // The iteration's found-inf (reads the dynamic scaler's device flag when part of it lives there).
  bool FoundInf() const { return *found_inf || (in_scaler_record && dynamic_scaler->RecordedOverflow()); }

  // Applies the recorded result once and returns to ready (no synchronisation on a device).
  void Finish() {
    if (Enabled()) {
      if (in_scaler_record) {
        if (*found_inf) {
          dynamic_scaler->MarkOverflow();
        }
        dynamic_scaler->UpdateScaleFromRecord();
      } else {
        scaler->UpdateScale(*found_inf);
      }
    }
    GradientMap result = std::move(unscaled_result);
    ClearIteration();
    previous_result = std::move(result);
  }

  // Unscales and records the overflow for this iteration. The built-in dynamic scaler records it
  // itself (UnscaleAndRecordOverflow: on a device, in its flag, without a synchronisation).
  void UnscaleAndRecord(const GradientMap& source) {
    UnscaledGradients result;
    if (!Enabled()) {
      TensorList(source);  // the same null check as when enabled
      result = UnscaledGradients{source, false};
    } else if (dynamic_scaler != nullptr) {
      if (!in_scaler_record) {
        dynamic_scaler->ClearRecordedOverflow();  // this iteration owns the record from here
      }
      result.Gradients = dynamic_scaler->UnscaleAndRecordOverflow(source);
      in_scaler_record = true;
    } else {
      result = scaler->UnscaleGradientsAndCheck(source);
    }
    unscaled = true;
    unscaled_source = source;
    unscaled_result = std::move(result.Gradients);
    found_inf = found_inf.value_or(false) || result.Overflow;
  }
};

GradScaler::GradScaler() : GradScaler(DynamicScalerConfig{}) {}

GradScaler::GradScaler(DynamicScalerConfig config)
    : impl_(std::make_unique<Impl>(std::make_shared<DynamicLossScaler>(config))) {}

GradScaler::GradScaler(std::shared_ptr<ILossScaler> scaler) {
  if (!scaler) {
    throw ArgumentNullError("scaler");
  }
  impl_ = std::make_unique<Impl>(std::move(scaler));
}

GradScaler GradScaler::Static(float scale, bool enabled) {
  return GradScaler(std::make_shared<StaticLossScaler>(scale, enabled));
}

GradScaler GradScaler::Dynamic(float initialScale, float growthFactor, float backoffFactor, int growthInterval,
                               float minScale, float maxScale, bool enabled) {
  return GradScaler(DynamicScalerConfig{.InitialScale = initialScale,
                                        .GrowthFactor = growthFactor,
                                        .BackoffFactor = backoffFactor,
                                        .GrowthInterval = growthInterval,
                                        .MinScale = minScale,
                                        .MaxScale = maxScale,
                                        .Enabled = enabled});
}

GradScaler::~GradScaler() = default;
GradScaler::GradScaler(GradScaler&& other) noexcept = default;
GradScaler& GradScaler::operator=(GradScaler&& other) noexcept = default;

const std::shared_ptr<ILossScaler>& GradScaler::Scaler() const noexcept { return impl_->scaler; }
float GradScaler::Scale() const { return impl_->scaler->Scale(); }
bool GradScaler::Enabled() const { return impl_->Enabled(); }

TensorPtr GradScaler::Scale(const TensorPtr& loss) {
  if (!loss) {
    throw ArgumentNullError("loss");
  }
  Impl& s = *impl_;
  if (s.found_inf.has_value()) {
    // The previous iteration recorded a result but never called Update() (spec 004's manual
    // flow skips it on overflow): apply it now, once.
    s.Finish();
  }
  TensorPtr scaled = s.Enabled() ? s.scaler->ScaleLoss(loss) : loss;
  s.previous_result.clear();  // a new loss means new gradients
  s.loss_scaled = true;
  return scaled;
}

GradientMap GradScaler::Unscale(const GradientMap& gradients) {
  Impl& s = *impl_;
  if (s.unscaled) {
    throw InvalidOperationError(
        "GradScaler::Unscale() was already called in this iteration; gradients are unscaled once per "
        "iteration. Call Update() (or Step()) to finish the iteration, then Scale(loss) for the next one.");
  }
  if (SameTensors(gradients, s.previous_result)) {
    throw InvalidOperationError(
        "GradScaler::Unscale(): these gradients were already unscaled in the previous iteration. Run backward "
        "for new gradients and call Scale(loss) before unscaling again.");
  }
  s.UnscaleAndRecord(gradients);
  return s.unscaled_result;
}

bool GradScaler::CheckOverflow(const GradientMap& gradients) {
  Impl& s = *impl_;
  TensorList(gradients);  // ArgumentNullError naming a null entry
  bool overflow = false;
  if (s.unscaled && (SameTensors(gradients, s.unscaled_source) || SameTensors(gradients, s.unscaled_result))) {
    overflow = s.FoundInf();  // the fused unscale pass already checked them: no second pass
  } else {
    overflow = s.Enabled() && s.scaler->CheckOverflow(gradients);
  }
  s.found_inf = s.found_inf.value_or(false) || overflow;
  return overflow;
}

void GradScaler::Update() {
  Impl& s = *impl_;
  if (!s.found_inf.has_value()) {
    throw InvalidOperationError(
        "GradScaler::Update() called with no overflow check recorded in this iteration: call Unscale(), "
        "CheckOverflow() or Step(optimizer, false) first (Step(optimizer) already updates the scale).");
  }
  s.Finish();
}

bool GradScaler::Step(IOptimizer& optimizer, bool optimizerStep) {
  return StepImpl(optimizer, optimizerStep, optimizerStep);
}

bool GradScaler::StepImpl(IOptimizer& optimizer, bool run_optimizer, bool update_scale) {
  Impl& s = *impl_;
  if (s.stepped) {
    throw InvalidOperationError(
        "GradScaler::Step() was already called in this iteration (with optimizerStep = false): call Update() "
        "to finish the iteration before stepping again.");
  }
  const GradientMap gradients = optimizer.GetGradients();
  GradientMap unscaled;
  bool overflow = false;
  if (s.unscaled) {
    // The clipping flow: Unscale(optimizer's gradients), clip, Step(optimizer).
    if (!SameTensors(gradients, s.unscaled_source) && !SameTensors(gradients, s.unscaled_result)) {
      throw InvalidOperationError(
          "GradScaler::Step(): Unscale() was called in this iteration on gradients that are not this "
          "optimizer's. Unscale the optimizer's own gradients (GetGradients()) or call Update() to finish "
          "the manual flow.");
    }
    unscaled = s.unscaled_result;
    overflow = s.FoundInf();  // the one read of a device flag in a step: Step must decide and return it
  } else {
    if (SameTensors(gradients, s.previous_result)) {
      throw InvalidOperationError(
          "GradScaler::Step() called twice on the same gradients: the previous Step() already unscaled and "
          "applied them. Run backward for new gradients and call Scale(loss) before stepping again.");
    }
    s.UnscaleAndRecord(gradients);
    unscaled = s.unscaled_result;
    overflow = s.FoundInf();  // the one read of a device flag in a step: Step must decide and return it
  }
  if (!overflow) {
    if (!SameTensors(unscaled, gradients)) {
      optimizer.SetGradients(unscaled);  // FP16/BF16 model gradients -> FP32 unscaled gradients
    }
    if (run_optimizer) {
      optimizer.Step();
    }
  }
  if (update_scale) {
    s.Finish();
  } else {
    s.stepped = true;
  }
  return !overflow;
}

void GradScaler::AbandonIteration() noexcept {
  impl_->ClearIteration();
  impl_->previous_result.clear();
}

void GradScaler::Enable() {
  Impl& s = *impl_;
  if (s.InIteration()) {
    throw InvalidOperationError(
        "GradScaler::Enable() called in the middle of an iteration (the loss or gradients were already "
        "scaled with the old setting): finish it with Step() or Update() first.");
  }
  if (s.static_scaler != nullptr) {
    s.static_scaler->SetEnabled(true);
  } else if (s.dynamic_scaler != nullptr) {
    s.dynamic_scaler->SetEnabled(true);
  }
  s.own_enabled = true;
}

void GradScaler::Disable() {
  Impl& s = *impl_;
  if (s.InIteration()) {
    throw InvalidOperationError(
        "GradScaler::Disable() called in the middle of an iteration (the loss or gradients were already "
        "scaled): finish it with Step() or Update() first.");
  }
  if (s.static_scaler != nullptr) {
    s.static_scaler->SetEnabled(false);
  } else if (s.dynamic_scaler != nullptr) {
    s.dynamic_scaler->SetEnabled(false);
  } else {
    s.own_enabled = false;
  }
}

void GradScaler::Reset() {
  Impl& s = *impl_;
  if (s.dynamic_scaler != nullptr) {
    s.dynamic_scaler->Reset();
  }
  AbandonIteration();
}

TensorPtr GradScaler::GetScaleTensor() {
  Impl& s = *impl_;
  if (s.static_scaler != nullptr) {
    return s.static_scaler->GetScaleTensor();
  }
  if (s.dynamic_scaler != nullptr) {
    return s.dynamic_scaler->GetScaleTensor();
  }
  const float factor = s.Enabled() ? s.scaler->Scale() : 1.0f;
  if (!s.custom_scale_tensor || s.custom_scale_value != factor) {
    s.custom_scale_tensor = Scalar(factor);
    s.custom_scale_value = factor;
  }
  return s.custom_scale_tensor;
}

std::optional<DynamicScalerStats> GradScaler::GetStats() const {
  if (impl_->dynamic_scaler != nullptr) {
    return impl_->dynamic_scaler->GetStats();
  }
  return std::nullopt;
}

std::vector<std::byte> GradScaler::StateDict() const {
  const Impl& s = *impl_;
  if (s.static_scaler == nullptr && s.dynamic_scaler == nullptr) {
    throw InvalidOperationError(
        "GradScaler::StateDict(): the wrapped scaler is a custom ILossScaler, whose state this class cannot "
        "see; save the custom scaler's state yourself.");
  }
  mlframework::detail::BlobWriter writer(kKind, kVersion);
  writer.U8(s.dynamic_scaler != nullptr ? kDynamicKind : kStaticKind);
  const std::vector<std::byte> inner =
      s.dynamic_scaler != nullptr ? s.dynamic_scaler->StateDict() : s.static_scaler->StateDict();
  writer.U64(inner.size());
  writer.Bytes(inner);
  writer.U8(s.found_inf.has_value() ? (s.FoundInf() ? 2 : 1) : 0);
  writer.U8(s.unscaled ? 1 : 0);
  writer.U8(s.stepped ? 1 : 0);
  writer.U8(s.loss_scaled ? 1 : 0);
  return writer.Finish();
}

void GradScaler::LoadStateDict(std::span<const std::byte> state) {
  Impl& s = *impl_;
  if (s.static_scaler == nullptr && s.dynamic_scaler == nullptr) {
    throw InvalidOperationError(
        "GradScaler::LoadStateDict(): the wrapped scaler is a custom ILossScaler; restore its state yourself.");
  }
  mlframework::detail::BlobReader reader(state, kKind, kVersion);
  const std::uint8_t kind = reader.U8();
  const std::uint8_t expected = s.dynamic_scaler != nullptr ? kDynamicKind : kStaticKind;
  if (kind != expected) {
    reader.Fail(std::string("holds the state of a ") + (kind == kDynamicKind ? "dynamic" : "static") +
                " scaler but this GradScaler wraps a " + (expected == kDynamicKind ? "dynamic" : "static") + " one");
  }
  const std::uint64_t inner_size = reader.U64();
  const std::span<const std::byte> inner = reader.Bytes(static_cast<std::size_t>(inner_size));
  const std::uint8_t found = reader.U8();
  const std::uint8_t unscaled = reader.U8();
  const std::uint8_t stepped = reader.U8();
  const std::uint8_t loss_scaled = reader.U8();
  reader.ExpectEnd();
  if (found > 2 || unscaled > 1 || stepped > 1 || loss_scaled > 1 || (stepped == 1 && unscaled == 0) ||
      (unscaled == 1 && found == 0)) {
    reader.Fail("holds an inconsistent iteration state");
  }
  // Decode the inner scaler into a temporary, then commit everything.
  std::optional<DynamicLossScaler> dynamic;
  std::optional<StaticLossScaler> static_scaler;
  if (s.dynamic_scaler != nullptr) {
    dynamic.emplace(*s.dynamic_scaler);
    dynamic->LoadStateDict(inner);
  } else {
    static_scaler.emplace(*s.static_scaler);
    static_scaler->LoadStateDict(inner);
  }
  if (dynamic) {
    *s.dynamic_scaler = *dynamic;
  } else {
    *s.static_scaler = *static_scaler;
  }
  s.ClearIteration();
  s.previous_result.clear();
  if (found != 0) {
    s.found_inf = found == 2;
  }
  s.unscaled = unscaled == 1;
  s.stepped = stepped == 1;
  s.loss_scaled = loss_scaled == 1;
}

}  // namespace mlframework::amp
