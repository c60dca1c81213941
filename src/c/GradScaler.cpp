#include <memory>
#include <optional>
#include <string>

#include <mlframework/c/grad_scaler.h>
#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/core/DLPack.hpp>

#include "Call.hpp"
#include "CallbackScaler.hpp"
#include "FieldMap.hpp"
#include "Handles.hpp"
#include "StateBytes.hpp"

namespace mlframework::c_api {
namespace {

constexpr FieldMap kDynamicScalerFields{
    Field{&mlfw_dynamic_scaler_config::initial_scale,
          &amp::DynamicScalerConfig::InitialScale,
          {"initial_scale", "InitialScale"}},
    Field{&mlfw_dynamic_scaler_config::growth_factor,
          &amp::DynamicScalerConfig::GrowthFactor,
          {"growth_factor", "GrowthFactor"}},
    Field{&mlfw_dynamic_scaler_config::backoff_factor,
          &amp::DynamicScalerConfig::BackoffFactor,
          {"backoff_factor", "BackoffFactor"}},
    Field{&mlfw_dynamic_scaler_config::growth_interval,
          &amp::DynamicScalerConfig::GrowthInterval,
          {"growth_interval", "GrowthInterval"}},
    Field{&mlfw_dynamic_scaler_config::min_scale, &amp::DynamicScalerConfig::MinScale, {"min_scale", "MinScale"}},
    Field{&mlfw_dynamic_scaler_config::max_scale, &amp::DynamicScalerConfig::MaxScale, {"max_scale", "MaxScale"}},
    Field{&mlfw_dynamic_scaler_config::hysteresis, &amp::DynamicScalerConfig::Hysteresis, {"hysteresis", "Hysteresis"}},
    Field{&mlfw_dynamic_scaler_config::enabled, &amp::DynamicScalerConfig::Enabled, {"enabled", "Enabled"}}};

constexpr EnumMap<mlfw_step_mode, amp::StepMode, 3> kStepModes{
    "mlfw_step_mode",
    {{{MLFW_STEP_AND_UPDATE, "MLFW_STEP_AND_UPDATE", amp::StepMode::StepAndUpdate},
      {MLFW_STEP_DEFER_UPDATE, "MLFW_STEP_DEFER_UPDATE", amp::StepMode::DeferUpdate},
      {MLFW_STEP_DEFER_STEP_AND_UPDATE, "MLFW_STEP_DEFER_STEP_AND_UPDATE", amp::StepMode::DeferStepAndUpdate}}}};

mlfw_status Create(mlfw_grad_scaler_t* out, const auto& make) {
  return Call([&] {
    Deref(out, "out");
    *out = std::make_unique<mlfw_grad_scaler>(make()).release();
  });
}

}  // namespace
}  // namespace mlframework::c_api

extern "C" {

mlfw_status mlfw_dynamic_scaler_config_default(mlfw_dynamic_scaler_config* config) {
  return Call([&] {
    Deref(config, "config") = mlframework::c_api::kDynamicScalerFields.ToC(mlframework::amp::DynamicScalerConfig{});
  });
}

mlfw_status mlfw_grad_scaler_create_dynamic(const mlfw_dynamic_scaler_config* config, mlfw_grad_scaler_t* out) {
  return mlframework::c_api::Create(out, [&] {
    const mlfw_dynamic_scaler_config& c_config = Deref(config, "config");
    return mlframework::c_api::WithCNames({{"config", mlframework::c_api::kDynamicScalerFields.Names()}}, [&] {
      return mlframework::amp::GradScaler(mlframework::c_api::kDynamicScalerFields.ToCpp(c_config, "config"));
    });
  });
}

mlfw_status mlfw_grad_scaler_create_static(float scale, int enabled, mlfw_grad_scaler_t* out) {
  return mlframework::c_api::Create(out, [&] { return mlframework::amp::GradScaler::Static(scale, enabled != 0); });
}

mlfw_status mlfw_grad_scaler_create_custom(const mlfw_scale_policy* policy, void* user, mlfw_grad_scaler_t* out) {
  return mlframework::c_api::Create(out, [&] {
    return mlframework::amp::GradScaler(
        std::make_shared<mlframework::c_api::CallbackScaler>(Deref(policy, "policy"), user));
  });
}

void mlfw_grad_scaler_destroy(mlfw_grad_scaler_t scaler) {
  delete scaler;  // NOLINT(cppcoreguidelines-owning-memory): the handle mlfw_grad_scaler_create_* made
}

mlfw_status mlfw_grad_scaler_scale(mlfw_grad_scaler_t scaler, const DLTensor* loss, void* stream,
                                   DLManagedTensor** scaled) {
  return Call([&] {
    mlfw_grad_scaler& handle = Deref(scaler, "scaler");
    handle.device = mlframework::c_api::ScaleLossInto(
        loss, stream, scaled, [&](const mlframework::TensorPtr& tensor) { return handle.scaler.Scale(tensor); });
  });
}

mlfw_status mlfw_grad_scaler_unscale(mlfw_grad_scaler_t scaler, mlfw_optimizer_t optimizer, void* stream) {
  return Call([&] {
    mlfw_grad_scaler& handle = Deref(scaler, "scaler");
    mlfw_optimizer& opt = Deref(optimizer, "optimizer");
    const StreamScope scope(stream, opt.device);
    handle.scaler.Unscale(opt.Optimizer());
    handle.device = opt.device;
  });
}

mlfw_status mlfw_grad_scaler_step(mlfw_grad_scaler_t scaler, mlfw_optimizer_t optimizer, mlfw_step_mode mode,
                                  void* stream, int* stepped) {
  return Call([&] {
    mlfw_grad_scaler& handle = Deref(scaler, "scaler");
    mlfw_optimizer& opt = Deref(optimizer, "optimizer");
    const mlframework::amp::StepMode cpp_mode = mlframework::c_api::kStepModes.ToCpp(mode, "mode");
    const StreamScope scope(stream, opt.device);
    const bool result = handle.scaler.Step(opt.Optimizer(), cpp_mode);
    handle.device = opt.device;
    if (stepped != nullptr) {
      *stepped = result ? 1 : 0;
    }
  });
}

mlfw_status mlfw_grad_scaler_update(mlfw_grad_scaler_t scaler, void* stream) {
  return Call([&] {
    mlfw_grad_scaler& handle = Deref(scaler, "scaler");
    const StreamScope scope(stream, handle.device);
    handle.scaler.Update();
  });
}

mlfw_status mlfw_grad_scaler_reset(mlfw_grad_scaler_t scaler) {
  return Call([&] { Deref(scaler, "scaler").scaler.Reset(); });
}

mlfw_status mlfw_grad_scaler_get_scale(mlfw_grad_scaler_t scaler, float* scale) {
  return Call([&] {
    const mlfw_grad_scaler& handle = Deref(scaler, "scaler");
    Deref(scale, "scale") = handle.scaler.CurrentScale();
  });
}

mlfw_status mlfw_grad_scaler_get_stats(mlfw_grad_scaler_t scaler, mlfw_scaler_stats* stats, int* has_stats) {
  return Call([&] {
    const mlfw_grad_scaler& handle = Deref(scaler, "scaler");
    Deref(stats, "stats");
    int& has = Deref(has_stats, "has_stats");
    const std::optional<mlframework::amp::DynamicScalerStats> cpp = handle.scaler.GetStats();
    has = cpp ? 1 : 0;
    if (cpp) {
      *stats = {.current_scale = cpp->CurrentScale,
                .steps_since_last_overflow = cpp->StepsSinceLastOverflow,
                .consecutive_overflows = cpp->ConsecutiveOverflows,
                .total_overflows = cpp->TotalOverflows,
                .total_steps = cpp->TotalSteps,
                .skipped_steps = cpp->SkippedSteps,
                .successful_steps = cpp->SuccessfulSteps,
                .min_scale = cpp->MinScale,
                .max_scale = cpp->MaxScale,
                .growth_interval = cpp->GrowthInterval};
    }
  });
}

mlfw_status mlfw_grad_scaler_set_amax_tracking(mlfw_grad_scaler_t scaler, int on) {
  return Call([&] { Deref(scaler, "scaler").scaler.SetAmaxTracking(on != 0); });
}

mlfw_status mlfw_grad_scaler_last_amax(mlfw_grad_scaler_t scaler, float* amax, int* has_amax) {
  return Call([&] {
    const mlfw_grad_scaler& handle = Deref(scaler, "scaler");
    Deref(amax, "amax");
    int& has = Deref(has_amax, "has_amax");
    const std::optional<float> value = handle.scaler.LastAmax();
    has = value ? 1 : 0;
    if (value) {
      *amax = *value;
    }
  });
}

mlfw_status mlfw_grad_scaler_state_dict(mlfw_grad_scaler_t scaler, void* buffer, size_t capacity, size_t* size) {
  return mlframework::c_api::SaveState(scaler, "scaler", buffer, capacity, size,
                                       [](const mlfw_grad_scaler& handle) { return handle.scaler.StateDict(); });
}

mlfw_status mlfw_grad_scaler_load_state_dict(mlfw_grad_scaler_t scaler, const void* data, size_t size) {
  return mlframework::c_api::LoadState(
      scaler, "scaler", data, size, [](mlfw_grad_scaler& handle, auto bytes) { handle.scaler.LoadStateDict(bytes); });
}

}  // extern "C"
