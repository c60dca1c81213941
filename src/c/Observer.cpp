#include <memory>
#include <string>

#include <mlframework/c/observer.h>
#include <mlframework/core/ITrainingObserver.hpp>
#include <mlframework/core/OverflowReport.hpp>

#include "Call.hpp"
#include "Handles.hpp"

namespace mlframework::c_api {
namespace {

// OnStep carries everything the other events say (skip, backoff, growth, the report).
class CallbackObserver final : public ITrainingObserver {
 public:
  CallbackObserver(mlfw_step_callback on_step, void* user) : on_step_(on_step), user_(user) {}
  void OnStep(const StepEvent& event) override {
    const std::string report = event.Overflow != nullptr ? event.Overflow->ToString() : std::string();
    const mlfw_step_event c_event{.step = event.Step,
                                  .loss_scale = event.LossScale,
                                  .new_loss_scale = event.NewLossScale,
                                  .skipped = event.Skipped ? 1 : 0,
                                  .has_gradient_amax = event.GradientAmax ? 1 : 0,
                                  .gradient_amax = event.GradientAmax.value_or(0.0f),
                                  .overflowed_tensors = event.Overflow != nullptr ? event.Overflow->Tensors.size() : 0,
                                  .overflow_report = report.c_str()};
    on_step_(user_, &c_event);
  }

 private:
  mlfw_step_callback on_step_;
  void* user_;
};

}  // namespace
}  // namespace mlframework::c_api

/// The observer, shared with the scalers it is registered with.
struct mlfw_observer {
  std::shared_ptr<mlframework::ITrainingObserver> observer;
};

extern "C" {

mlfw_status mlfw_observer_create(mlfw_step_callback on_step, void* user, mlfw_observer_t* out) {
  return Call([&] {
    Deref(out, "out");
    if (on_step == nullptr) {
      throw mlframework::ArgumentNullError("on_step");
    }
    auto handle = std::make_unique<mlfw_observer>();
    handle->observer = std::make_shared<mlframework::c_api::CallbackObserver>(on_step, user);
    *out = handle.release();
  });
}

void mlfw_observer_destroy(mlfw_observer_t observer) {
  delete observer;  // NOLINT(cppcoreguidelines-owning-memory): the handle mlfw_observer_create made
}

mlfw_status mlfw_grad_scaler_add_observer(mlfw_grad_scaler_t scaler, mlfw_observer_t observer) {
  return Call([&] { Deref(scaler, "scaler").scaler.AddObserver(Deref(observer, "observer").observer); });
}

mlfw_status mlfw_grad_scaler_remove_observer(mlfw_grad_scaler_t scaler, mlfw_observer_t observer, int* removed) {
  return Call([&] {
    mlfw_grad_scaler& handle = Deref(scaler, "scaler");
    const bool result = handle.scaler.RemoveObserver(Deref(observer, "observer").observer);
    if (removed != nullptr) {
      *removed = result ? 1 : 0;
    }
  });
}

}  // extern "C"
