#include <memory>
#include <string>
#include <vector>

#include <mlframework/c/conversion_layer.h>
#include <mlframework/core/DLPack.hpp>
#include <mlframework/optimizers/mixed_precision/GradientConversionLayer.hpp>

#include "Call.hpp"
#include "FieldMap.hpp"
#include "Handles.hpp"
#include "StateBytes.hpp"

namespace mp = mlframework::optimizers::mixed_precision;

/// A GradientConversionLayer and the gradients lent to it (reused while the caller lends the same).
struct mlfw_conversion_layer {
  explicit mlfw_conversion_layer(const mp::MixedPrecisionOptions& options) : layer(options) {}
  mp::GradientConversionLayer layer;
  mlframework::c_api::NamedTensors gradients;
};

namespace mlframework::c_api {
namespace {

constexpr EnumMap<mlfw_precision, DataType, 3> kPrecisions{
    "mlfw_precision",
    {{{MLFW_PRECISION_FLOAT32, "MLFW_PRECISION_FLOAT32", DataType::Float32},
      {MLFW_PRECISION_FLOAT16, "MLFW_PRECISION_FLOAT16", DataType::Float16},
      {MLFW_PRECISION_BFLOAT16, "MLFW_PRECISION_BFLOAT16", DataType::BFloat16}}}};

using Options = mlfw_mixed_precision_options;
constexpr FieldMap kOptionsFields{
    EnumField{&Options::precision, &mp::MixedPrecisionOptions::Precision, kPrecisions, {"precision", "Precision"}},
    Field{&Options::enable_dynamic_loss_scaling,
          &mp::MixedPrecisionOptions::EnableDynamicLossScaling,
          {"enable_dynamic_loss_scaling", "EnableDynamicLossScaling"}},
    Field{&Options::initial_loss_scale,
          &mp::MixedPrecisionOptions::InitialLossScale,
          {"initial_loss_scale", "InitialLossScale"}},
    Field{&Options::growth_factor, &mp::MixedPrecisionOptions::GrowthFactor, {"growth_factor", "GrowthFactor"}},
    Field{&Options::backoff_factor, &mp::MixedPrecisionOptions::BackoffFactor, {"backoff_factor", "BackoffFactor"}},
    Field{&Options::growth_interval, &mp::MixedPrecisionOptions::GrowthInterval, {"growth_interval", "GrowthInterval"}},
    Field{&Options::min_loss_scale, &mp::MixedPrecisionOptions::MinLossScale, {"min_loss_scale", "MinLossScale"}},
    Field{&Options::max_loss_scale, &mp::MixedPrecisionOptions::MaxLossScale, {"max_loss_scale", "MaxLossScale"}},
    Field{&Options::max_consecutive_overflows,
          &mp::MixedPrecisionOptions::MaxConsecutiveOverflows,
          {"max_consecutive_overflows", "MaxConsecutiveOverflows"}},
    Field{&Options::enable_gradient_clipping,
          &mp::MixedPrecisionOptions::EnableGradientClipping,
          {"enable_gradient_clipping", "EnableGradientClipping"}},
    Field{&Options::max_grad_norm, &mp::MixedPrecisionOptions::MaxGradNorm, {"max_grad_norm", "MaxGradNorm"}},
    Field{&Options::enable_auto_fallback,
          &mp::MixedPrecisionOptions::EnableAutoFallback,
          {"enable_auto_fallback", "EnableAutoFallback"}}};

// Deletes a managed tensor that has not been handed to the caller yet.
struct ManagedDeleter {
  void operator()(DLManagedTensor* managed) const { managed->deleter(managed); }
};

}  // namespace
}  // namespace mlframework::c_api

extern "C" {

mlfw_status mlfw_mixed_precision_options_default(mlfw_mixed_precision_options* options) {
  return Call([&] {
    Deref(options, "options") = mlframework::c_api::kOptionsFields.ToC(mp::MixedPrecisionOptions::ForFP16());
  });
}

mlfw_status mlfw_conversion_layer_create(const mlfw_mixed_precision_options* options, mlfw_conversion_layer_t* out) {
  return Call([&] {
    const mlfw_mixed_precision_options& c_options = Deref(options, "options");
    Deref(out, "out");
    *out = mlframework::c_api::WithCNames({{"options", mlframework::c_api::kOptionsFields.Names()}}, [&] {
             return std::make_unique<mlfw_conversion_layer>(
                 mlframework::c_api::kOptionsFields.ToCpp(c_options, "options"));
           }).release();
  });
}

void mlfw_conversion_layer_destroy(mlfw_conversion_layer_t layer) {
  delete layer;  // NOLINT(cppcoreguidelines-owning-memory): the handle mlfw_conversion_layer_create made
}

mlfw_status mlfw_conversion_layer_scale_loss(mlfw_conversion_layer_t layer, const DLTensor* loss, void* stream,
                                             DLManagedTensor** scaled) {
  return Call([&] {
    const mlfw_conversion_layer& handle = Deref(layer, "layer");
    mlframework::c_api::ScaleLossInto(
        loss, stream, scaled, [&](const mlframework::TensorPtr& tensor) { return handle.layer.ScaleLoss(tensor); });
  });
}

mlfw_status mlfw_conversion_layer_process(mlfw_conversion_layer_t layer, const char* const* names,
                                          const DLTensor* const* gradients, size_t count, void* stream,
                                          mlfw_optimizer_t optimizer, DLManagedTensor** fp32_gradients,
                                          int* should_skip) {
  return Call([&] {
    mlfw_conversion_layer& handle = Deref(layer, "layer");
    int& skip = Deref(should_skip, "should_skip");
    const mlframework::GradientMap& map = handle.gradients.Read(names, gradients, count, "gradients");
    const StreamScope scope(stream, mlframework::c_api::DeviceOf(map));
    mp::GradientProcessingResult result = handle.layer.ProcessGradients(map);
    handle.gradients.Commit();
    skip = result.ShouldSkip ? 1 : 0;
    if (result.ShouldSkip) {
      return;
    }
    // Everything that can fail first; the caller's array is written only once all are exported.
    std::vector<std::unique_ptr<DLManagedTensor, mlframework::c_api::ManagedDeleter>> exported;
    if (fp32_gradients != nullptr) {
      for (size_t i = 0; i < count; ++i) {
        exported.emplace_back(mlframework::ToDLPack(result.Gradients.at(names[i])));
      }
    }
    if (optimizer != nullptr) {
      optimizer->Optimizer().SetGradients(result.Gradients);
    }
    for (size_t i = 0; i < exported.size(); ++i) {
      fp32_gradients[i] = exported[i].release();
    }
  });
}

mlfw_status mlfw_conversion_layer_get_stats(mlfw_conversion_layer_t layer, mlfw_conversion_stats* stats) {
  return Call([&] {
    const mlfw_conversion_layer& handle = Deref(layer, "layer");
    mlfw_conversion_stats& out = Deref(stats, "stats");
    const mp::GradientProcessingStats cpp = handle.layer.GetStats();
    out = {.loss_scale = cpp.LossScale,
           .clip_count = cpp.ClipCount,
           .last_gradient_norm = cpp.LastGradientNorm,
           .fell_back_to_fp32 = cpp.FellBackToFP32 ? 1 : 0,
           .fallback_step = cpp.FallbackStep,
           .overflows_at_min_scale = cpp.OverflowsAtMinScale,
           .total_overflows = cpp.LossScalerStats.TotalOverflows};
  });
}

mlfw_status mlfw_conversion_layer_state_dict(mlfw_conversion_layer_t layer, void* buffer, size_t capacity,
                                             size_t* size) {
  return mlframework::c_api::SaveState(layer, "layer", buffer, capacity, size,
                                       [](const mlfw_conversion_layer& handle) { return handle.layer.StateDict(); });
}

mlfw_status mlfw_conversion_layer_load_state_dict(mlfw_conversion_layer_t layer, const void* data, size_t size) {
  return mlframework::c_api::LoadState(
      layer, "layer", data, size, [](mlfw_conversion_layer& handle, auto bytes) { handle.layer.LoadStateDict(bytes); });
}

}  // extern "C"
