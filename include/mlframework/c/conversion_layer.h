/// @file conversion_layer.h
/// @brief C API: the gradient conversion layer (C++ mixed_precision::GradientConversionLayer):
/// overflow check, unscale, clip and convert FP16/BF16 gradients to FP32 in two passes, with the
/// automatic fallback to FP32.
#ifndef MLFRAMEWORK_C_CONVERSION_LAYER_H_
#define MLFRAMEWORK_C_CONVERSION_LAYER_H_

// C declarations, for C compilers: C's typedefs and headers, and the C API's mlfw_ names.
// NOLINTBEGIN(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include <mlframework/c/optimizers.h>
#include <mlframework/c/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/// A GradientConversionLayer with its dynamic loss scaler and precision manager.
typedef struct mlfw_conversion_layer* mlfw_conversion_layer_t;

/// The training precision (C++ DataType's floating-point types that gradients may have).
typedef enum mlfw_precision {
  MLFW_PRECISION_FLOAT32 = 0,  ///< FP32: no loss scaling.
  MLFW_PRECISION_FLOAT16 = 1,  ///< FP16: dynamic loss scaling.
  MLFW_PRECISION_BFLOAT16 = 2  ///< BF16.
} mlfw_precision;

/// The layer's settings (C++ MixedPrecisionOptions; mlfw_mixed_precision_options_default()
/// fills its FP16 recipe). Checked as in C++; the message names the field (`options->growth_factor`).
typedef struct mlfw_mixed_precision_options {
  mlfw_precision precision;         ///< Precision of the parameters and gradients; default FP16.
  int enable_dynamic_loss_scaling;  ///< Non-zero: scale the loss and check for overflow; default 1.
  float initial_loss_scale;         ///< Default 65536.
  float growth_factor;              ///< > 1; default 2.
  float backoff_factor;             ///< In (0, 1); default 0.5.
  int growth_interval;              ///< >= 1; default 2000.
  float min_loss_scale;             ///< Finite, > 0; default 1.
  float max_loss_scale;             ///< Finite, >= min_loss_scale; default 2^24.
  int max_consecutive_overflows;    ///< Overflows in a row at the minimum scale before the fallback; default 10.
  int enable_gradient_clipping;     ///< Non-zero: clip by the global L2 norm; default 0.
  float max_grad_norm;              ///< Largest global L2 norm (<= 0: no clipping); default 1.
  int enable_auto_fallback;         ///< Non-zero: fall back to FP32 after the overflows above; default 1.
} mlfw_mixed_precision_options;

/// The layer's counters (C++ GradientProcessingStats, the part that is plain data).
typedef struct mlfw_conversion_stats {
  float loss_scale;                ///< Current loss scale.
  int64_t clip_count;              ///< Clipping operations since creation or reset.
  float last_gradient_norm;        ///< Global L2 norm of the last unscaled gradients measured.
  int fell_back_to_fp32;           ///< 1 once the automatic fallback to FP32 happened.
  int64_t fallback_step;           ///< The step (from 1) it happened on; 0 before.
  int64_t overflows_at_min_scale;  ///< Overflows in a row at the minimum scale.
  int64_t total_overflows;         ///< The loss scaler's overflows.
} mlfw_conversion_stats;

/// Fills @p options with the FP16 recipe (C++ MixedPrecisionOptions::ForFP16()).
MLFW_C_API mlfw_status mlfw_mixed_precision_options_default(mlfw_mixed_precision_options* options);
/// Creates a layer configured by @p options. On failure *@p out is not written.
MLFW_C_API mlfw_status mlfw_conversion_layer_create(const mlfw_mixed_precision_options* options,
                                                    mlfw_conversion_layer_t* out);
/// Destroys @p layer (null is accepted and does nothing).
MLFW_C_API void mlfw_conversion_layer_destroy(mlfw_conversion_layer_t layer);

/// The loss times the current scale (C++ ScaleLoss), as a managed tensor the caller owns (call
/// its deleter once); without loss scaling a copy of the loss, never a view of @p loss, which is
/// borrowed for the call only. @p stream: see mlfw_optimizer_step(); as for the scaler's
/// mlfw_grad_scaler_scale(), the tensor's memory is reused only after the work queued on
/// @p stream before the deleter's call.
MLFW_C_API mlfw_status mlfw_conversion_layer_scale_loss(mlfw_conversion_layer_t layer, const DLTensor* loss,
                                                        void* stream, DLManagedTensor** scaled);
/// One step's gradients (C++ ProcessGradients): overflow check, unscale, clip, convert to FP32;
/// updates the scale. *@p should_skip receives 1 when they overflowed (skip the optimizer step).
/// Otherwise the FP32 gradients go to @p optimizer (SetGradients) when it is not NULL, and to
/// @p fp32_gradients[i] (managed tensors the caller owns, in the order of @p names) when that
/// array is not NULL; on a skipped step neither is written. The gradients are borrowed for the
/// call, except FP32 ones: they are unscaled in place, and their `fp32_gradients[i]` and the
/// optimizer's gradients view the caller's memory, which must outlive them. A framework passing
/// the same buffers every step converts nothing anew. An @p optimizer
/// that refuses the gradients (other names or shapes) fails the call after the layer processed
/// the step (its scale updated): give it the parameters the gradients belong to.
MLFW_C_API mlfw_status mlfw_conversion_layer_process(mlfw_conversion_layer_t layer, const char* const* names,
                                                     const DLTensor* const* gradients, size_t count, void* stream,
                                                     mlfw_optimizer_t optimizer, DLManagedTensor** fp32_gradients,
                                                     int* should_skip);
/// Writes the layer's counters into *@p stats.
MLFW_C_API mlfw_status mlfw_conversion_layer_get_stats(mlfw_conversion_layer_t layer, mlfw_conversion_stats* stats);
/// The layer's state (C++ StateDict()) as bytes: see mlfw_grad_scaler_state_dict().
MLFW_C_API mlfw_status mlfw_conversion_layer_state_dict(mlfw_conversion_layer_t layer, void* buffer, size_t capacity,
                                                        size_t* size);
/// Restores bytes from mlfw_conversion_layer_state_dict(); MLFW_STATUS_INVALID_ARGUMENT for a
/// truncated, corrupted or foreign blob, the layer unchanged.
MLFW_C_API mlfw_status mlfw_conversion_layer_load_state_dict(mlfw_conversion_layer_t layer, const void* data,
                                                             size_t size);

#ifdef __cplusplus
}
#endif

// NOLINTEND(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#endif  // MLFRAMEWORK_C_CONVERSION_LAYER_H_
