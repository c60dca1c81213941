/// @file observer.h
/// @brief C API: a training observer as a C callback (C++ ITrainingObserver::OnStep).
#ifndef MLFRAMEWORK_C_OBSERVER_H_
#define MLFRAMEWORK_C_OBSERVER_H_

// C declarations, for C compilers: C's typedefs and headers, and the C API's mlfw_ names.
// NOLINTBEGIN(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#include <stddef.h>
#include <stdint.h>

#include <mlframework/c/grad_scaler.h>
#include <mlframework/c/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/// What one finished iteration reports (C++ StepEvent). Valid during the callback only.
typedef struct mlfw_step_event {
  int64_t step;                 ///< The step index (0 for the first finished iteration).
  float loss_scale;             ///< The scale the iteration's gradients were produced with.
  float new_loss_scale;         ///< The scale after the iteration's update.
  int skipped;                  ///< 1 when the optimizer step was skipped (Inf/NaN gradients).
  int has_gradient_amax;        ///< 1 when gradient_amax holds a value (amax tracking on).
  float gradient_amax;          ///< Largest finite |g| of the unscaled gradients.
  size_t overflowed_tensors;    ///< Gradients holding Inf or NaN (0 when none overflowed).
  const char* overflow_report;  ///< The overflow report as text ("" when none overflowed).
} mlfw_step_event;

/// Called once per finished iteration, after the scale update, with the `user` pointer given
/// to mlfw_observer_create(). It must not call the C API on the scaler that reports.
typedef void (*mlfw_step_callback)(void* user, const mlfw_step_event* event);

/// An observer: @p on_step with @p user.
typedef struct mlfw_observer* mlfw_observer_t;

/// Creates an observer calling @p on_step (required) with @p user.
MLFW_C_API mlfw_status mlfw_observer_create(mlfw_step_callback on_step, void* user, mlfw_observer_t* out);
/// Destroys the handle (null is accepted). A scaler it is registered with keeps calling it until
/// it is removed or the scaler destroyed: remove it first when @p user goes away.
MLFW_C_API void mlfw_observer_destroy(mlfw_observer_t observer);
/// Registers @p observer with @p scaler. MLFW_STATUS_INVALID_ARGUMENT when already registered.
MLFW_C_API mlfw_status mlfw_grad_scaler_add_observer(mlfw_grad_scaler_t scaler, mlfw_observer_t observer);
/// Unregisters @p observer; *@p removed (may be NULL) receives 0 when it was not registered.
MLFW_C_API mlfw_status mlfw_grad_scaler_remove_observer(mlfw_grad_scaler_t scaler, mlfw_observer_t observer,
                                                        int* removed);

#ifdef __cplusplus
}
#endif

// NOLINTEND(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#endif  // MLFRAMEWORK_C_OBSERVER_H_
