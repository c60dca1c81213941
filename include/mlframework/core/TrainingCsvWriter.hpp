#pragma once
/// @file TrainingCsvWriter.hpp
/// @brief An ITrainingObserver that writes one CSV row per step.

#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>

#include <mlframework/core/ITrainingObserver.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// Writes `step,scale,skipped,grad_norm,overflowing_tensors,new_scale,amax,nan_count,inf_count`
/// (the header, at construction) and one row per step (ITrainingObserver::OnStep):
///
/// | column | value |
/// |---|---|
/// | step | StepEvent::Step |
/// | scale | the loss scale the step's gradients were produced with (`%.9g`) |
/// | skipped | 1 when the optimizer step was skipped, else 0 |
/// | grad_norm | the global norm (`%.9g`) when the front end measured it (clipping), else empty |
/// | overflowing_tensors | the overflow report's gradient names joined by ';', in double quotes (a `"` in a name
/// doubled); `""` on clean steps |
/// | new_scale | the scale after the step's update (`%.9g`) |
/// | amax | the largest finite absolute value of the unscaled gradients (`%.9g`) while the front end's
/// amax tracking is on, else empty |
/// | nan_count | NaN elements over all gradients of the step's overflow report (0 on clean steps) |
/// | inf_count | +Inf and -Inf elements over all gradients of the step's overflow report |
///
/// Rows go to a std::ostream (each followed by '\n' and flushed) or to a callback (without it).
/// A moved-from writer throws InvalidOperationError from OnStep().
class MLFRAMEWORK_EXPORT TrainingCsvWriter final : public ITrainingObserver {
 public:
  /// Receives one line at a time, without a trailing newline.
  using Sink = std::function<void(std::string_view)>;
  /// The header line.
  static constexpr std::string_view kHeader =
      "step,scale,skipped,grad_norm,overflowing_tensors,new_scale,amax,nan_count,inf_count";

  /// Writes to @p out (which must outlive the writer); the header is written now. ArgumentError("out")
  /// for a stream already in a failed state (a file that could not be opened).
  explicit TrainingCsvWriter(std::ostream& out);
  /// Writes through @p sink (ArgumentNullError("sink") for an empty function); the header is written now.
  explicit TrainingCsvWriter(Sink sink);

  void OnStep(const StepEvent& event) override;

  /// The row OnStep() writes for @p event.
  static std::string Row(const StepEvent& event);
  /// Rows written so far (the header not counted).
  std::int64_t RowsWritten() const noexcept { return rows_; }

 private:
  Sink sink_;
  std::int64_t rows_ = 0;
};

}  // namespace mlframework
