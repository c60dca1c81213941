// docs/diagnostics.md: overflow reports, observers, amax and headroom.
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/mlframework.hpp>

using namespace mlframework;

// A line per burst of overflows in the log, a CSV line per step.
void WatchOverflows(amp::GradScaler& scaler, std::ostream& log, std::ostream& csv_file) {
  scaler.AddObserver(std::make_shared<OverflowLogger>(log));          // one line per burst of overflows
  scaler.AddObserver(std::make_shared<TrainingCsvWriter>(csv_file));  // step,scale,skipped,grad_norm,...
  scaler.SetAmaxTracking(true);  // LastAmax(): the largest finite unscaled gradient value
}

// Reports in the framework's terms: its global step, its parameters in registration order.
void FollowTheFramework(amp::GradScaler& scaler, std::int64_t global_step, std::vector<std::string> parameter_names) {
  scaler.SetGradientOrder(std::move(parameter_names));  // reports list offending tensors in this order
  scaler.SetStepIndex(global_step);                     // events, reports and StateDict() use it from now on
}

// After a step: which tensor overflowed, and how far the scale is from overflowing FP16.
void PrintDiagnostics(const amp::GradScaler& scaler, std::ostream& log) {
  if (const auto& report = scaler.LastOverflow()) {
    log << report->ToString() << '\n';
  }
  if (const std::optional<float> amax = scaler.LastAmax()) {
    log << "headroom: " << HeadroomBits(*amax, scaler.CurrentScale(), DataType::Float16) << " doublings\n";
  }
}
