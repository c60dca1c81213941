/// @file grad_scaler.h
/// @brief C API: the loss scaler and PyTorch's GradScaler iteration (C++ amp::GradScaler).
#ifndef MLFRAMEWORK_C_GRAD_SCALER_H_
#define MLFRAMEWORK_C_GRAD_SCALER_H_

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

/// A GradScaler: a static or dynamic loss scaler with the iteration protocol of
/// torch.cuda.amp.GradScaler (C++ amp::GradScaler; its class notes describe every state).
typedef struct mlfw_grad_scaler* mlfw_grad_scaler_t;

/// The dynamic scaler's settings (C++ DynamicScalerConfig). mlfw_dynamic_scaler_config_default()
/// fills the defaults.
typedef struct mlfw_dynamic_scaler_config {
  float initial_scale;   ///< Scale before the first step; default 65536.
  float growth_factor;   ///< Multiplier after growth_interval clean steps (> 1); default 2.
  float backoff_factor;  ///< Multiplier on overflow (strictly between 0 and 1); default 0.5.
  int growth_interval;   ///< Consecutive clean steps before growth (>= 1); default 2000.
  float min_scale;       ///< Lower bound of the scale (> 0); default 1.
  float max_scale;       ///< Upper bound of the scale (finite, >= min_scale); default 2^24.
  int hysteresis;        ///< Overflows in a row before backing off (>= 1); default 1.
  int enabled;           ///< Non-zero: scaling is applied; default 1.
} mlfw_dynamic_scaler_config;

/// The dynamic scaler's statistics (C++ DynamicScalerStats).
typedef struct mlfw_scaler_stats {
  float current_scale;                ///< The scale now.
  int64_t steps_since_last_overflow;  ///< Clean steps since the last overflow or growth.
  int64_t consecutive_overflows;      ///< Overflows in a row.
  int64_t total_overflows;            ///< Updates that reported an overflow.
  int64_t total_steps;                ///< Updates while enabled.
  int64_t skipped_steps;              ///< Steps skipped because they overflowed.
  int64_t successful_steps;           ///< total_steps - skipped_steps.
  float min_scale;                    ///< Configured lower bound.
  float max_scale;                    ///< Configured upper bound.
  int growth_interval;                ///< Configured growth interval.
} mlfw_scaler_stats;

/// What mlfw_grad_scaler_step() does after unscaling (C++ amp::StepMode).
typedef enum mlfw_step_mode {
  MLFW_STEP_AND_UPDATE = 0,            ///< Steps the optimizer unless it overflowed, then updates the scale.
  MLFW_STEP_DEFER_UPDATE = 1,          ///< Steps the optimizer unless it overflowed; mlfw_grad_scaler_update() later.
  MLFW_STEP_DEFER_STEP_AND_UPDATE = 2  ///< Neither: step yourself when it returned 1, then update.
} mlfw_step_mode;

/// A scaling policy of your own, as C callbacks (C++: a custom amp::ILossScaler). The policy
/// owns the scale; the library does the tensor work (scaling the loss, the fused unscale and
/// check, FP32 buffers for FP16/BF16 gradients) exactly as its static scaler does with the
/// scale the policy gives, and GradScaler drives it with the same flows. Each callback gets the
/// `user` pointer given at creation and returns 0 on success; anything else fails the C API
/// call that ran it with MLFW_STATUS_CALLBACK_ERROR. The callbacks run on the thread that
/// calls the C API, never concurrently for one scaler.
typedef struct mlfw_scale_policy {
  /// Writes the current scale (finite, > 0) into *scale. Called at creation and after each
  /// update and reset. Required.
  int (*scale)(void* user, float* scale);
  /// The iteration finished: @p overflow is 1 when its gradients held Inf or NaN (the step was
  /// skipped), else 0. Adapt your scale. Required.
  int (*update)(void* user, int overflow);
  /// Back to the initial state (mlfw_grad_scaler_reset()). May be NULL: nothing to reset.
  int (*reset)(void* user);
} mlfw_scale_policy;

/// Fills @p config with DynamicScalerConfig's defaults. MLFW_STATUS_NULL_ARGUMENT for null.
MLFW_C_API mlfw_status mlfw_dynamic_scaler_config_default(mlfw_dynamic_scaler_config* config);

/// Creates a dynamic scaler configured by @p config (every field checked as in C++; the message
/// names the field). On failure *@p out is not written.
MLFW_C_API mlfw_status mlfw_grad_scaler_create_dynamic(const mlfw_dynamic_scaler_config* config,
                                                       mlfw_grad_scaler_t* out);
/// Creates a static scaler with @p scale (finite, > 0); @p enabled zero passes everything through.
MLFW_C_API mlfw_status mlfw_grad_scaler_create_static(float scale, int enabled, mlfw_grad_scaler_t* out);
/// Creates a scaler driven by @p policy (copied; the callbacks are called with @p user, which
/// must stay valid until mlfw_grad_scaler_destroy()). MLFW_STATUS_NULL_ARGUMENT naming a missing
/// required callback; MLFW_STATUS_INVALID_ARGUMENT when the scale it gives is not finite and > 0.
/// Its state bytes hold its scale and enabled flag (the C++ ILossScaler default).
MLFW_C_API mlfw_status mlfw_grad_scaler_create_custom(const mlfw_scale_policy* policy, void* user,
                                                      mlfw_grad_scaler_t* out);
/// Destroys @p scaler (null is accepted and does nothing).
MLFW_C_API void mlfw_grad_scaler_destroy(mlfw_grad_scaler_t scaler);

/// The loss times the scale, as a new tensor (C++ Scale(loss)); starts an iteration. *@p scaled
/// receives a DLPack managed tensor that the caller owns: call its deleter once (or hand it to a
/// framework's from_dlpack). A disabled scaler gives a copy of the loss, never a view of it: @p loss
/// is borrowed for the call only. @p stream: see mlfw_optimizer_step(); on a CUDA device the
/// scaled loss's memory is reused only after the work queued on @p stream before the deleter's
/// call, so @p stream must still exist then.
MLFW_C_API mlfw_status mlfw_grad_scaler_scale(mlfw_grad_scaler_t scaler, const DLTensor* loss, void* stream,
                                              DLManagedTensor** scaled);
/// Unscales the optimizer's gradients (PyTorch's `unscale_(optimizer)`, before clipping): FP32
/// in place, FP16/BF16 into FP32 tensors the scaler keeps, which the next step hands to the
/// optimizer.
MLFW_C_API mlfw_status mlfw_grad_scaler_unscale(mlfw_grad_scaler_t scaler, mlfw_optimizer_t optimizer, void* stream);
/// Unscales the optimizer's gradients (unless mlfw_grad_scaler_unscale() did), then does what
/// @p mode says. *@p stepped receives 1 when the optimizer's gradients were finite (stepped, or
/// to be stepped by you with MLFW_STEP_DEFER_STEP_AND_UPDATE) and 0 when they overflowed (the
/// step skipped). @p stepped may be NULL.
MLFW_C_API mlfw_status mlfw_grad_scaler_step(mlfw_grad_scaler_t scaler, mlfw_optimizer_t optimizer, mlfw_step_mode mode,
                                             void* stream, int* stepped);
/// Applies the iteration's overflow result to the scale (C++ Update()); after a step with
/// MLFW_STEP_AND_UPDATE it changes nothing. @p stream: see mlfw_optimizer_step(); the device is
/// that of the tensors of the iteration.
MLFW_C_API mlfw_status mlfw_grad_scaler_update(mlfw_grad_scaler_t scaler, void* stream);

/// Back to the initial state (C++ Reset()): the dynamic scaler's initial scale and cleared
/// counters, a custom policy's reset callback; the iteration is dropped.
MLFW_C_API mlfw_status mlfw_grad_scaler_reset(mlfw_grad_scaler_t scaler);
/// Writes the current scale into *@p scale.
MLFW_C_API mlfw_status mlfw_grad_scaler_get_scale(mlfw_grad_scaler_t scaler, float* scale);
/// Writes the statistics into *@p stats and 1 into *@p has_stats for a dynamic scaler; 0 into
/// *@p has_stats (and @p stats untouched) for a static one.
MLFW_C_API mlfw_status mlfw_grad_scaler_get_stats(mlfw_grad_scaler_t scaler, mlfw_scaler_stats* stats, int* has_stats);
/// Turns amax tracking on (non-zero) or off (C++ SetAmaxTracking): the unscale also takes the
/// largest finite |g| of the unscaled gradients.
MLFW_C_API mlfw_status mlfw_grad_scaler_set_amax_tracking(mlfw_grad_scaler_t scaler, int on);
/// The amax of the last finished iteration (C++ LastAmax): *@p has_amax is 0 when there is none
/// (tracking off, no such iteration yet), and *@p amax is then untouched.
MLFW_C_API mlfw_status mlfw_grad_scaler_last_amax(mlfw_grad_scaler_t scaler, float* amax, int* has_amax);

/// The scaler's state (C++ StateDict(): scale, counters, iteration state, step index) as bytes.
/// With @p buffer NULL writes the size into *@p size; otherwise @p capacity must be at least that
/// size and *@p size receives the bytes written.
MLFW_C_API mlfw_status mlfw_grad_scaler_state_dict(mlfw_grad_scaler_t scaler, void* buffer, size_t capacity,
                                                   size_t* size);
/// Restores bytes from mlfw_grad_scaler_state_dict() (the blob's configuration wins, as in
/// PyTorch). MLFW_STATUS_INVALID_ARGUMENT for a truncated, corrupted or foreign blob (one of
/// another scaler kind); the scaler is unchanged then.
MLFW_C_API mlfw_status mlfw_grad_scaler_load_state_dict(mlfw_grad_scaler_t scaler, const void* data, size_t size);

#ifdef __cplusplus
}
#endif

// NOLINTEND(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#endif  // MLFRAMEWORK_C_GRAD_SCALER_H_
