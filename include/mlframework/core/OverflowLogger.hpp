#pragma once
/// @file OverflowLogger.hpp
/// @brief A rate-limited ITrainingObserver: one summary line per burst of overflows (or per N steps).

#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

#include <mlframework/core/ITrainingObserver.hpp>
#include <mlframework/export.hpp>

namespace mlframework {

/// How often an OverflowLogger writes (see its class notes).
struct OverflowLoggerOptions {
  /// 0: one line per burst of overflows; N > 0: one line per window of N steps (>= 0).
  std::int64_t Interval = 0;
  /// A summary that holds overflows and has run this many steps is written without waiting for
  /// its end, and the rest of the burst (or window) continues in the next line (>= 1).
  std::int64_t ProgressSteps = 100;
  /// The same after this many seconds since the summary's first step (finite, > 0), so a run
  /// that overflows on every step of a slow iteration still logs while it runs.
  double ProgressSeconds = 60.0;
};

/// Writes overflow summaries, never one line per overflow inside a burst.
///
/// - `Interval == 0` (default): one line per burst (overflow steps in a row), written at the
///   first clean step after it, at Flush() or at destruction:
///   `steps 10-25: 16 overflows, scale 2^32 -> 2^16, first: layer3.weight (12 Inf, first at 4)`.
///   Clean steps write nothing.
/// - `Interval == N > 0`: one line per window of N steps (steps kN .. kN+N-1), written when a
///   step of a later window arrives, at Flush() or at destruction, also for a window without
///   overflows, so the log shows the scale regularly:
///   `steps 0-99: 0 overflows, scale 2^16 -> 2^17`.
/// - **A long burst still logs while it runs:** once a summary that holds overflows has run
///   ProgressSteps steps, or ProgressSeconds since its first step, it is written with
///   `(continuing)` at once and the next line picks up at the following step:
///   `steps 10-109: 100 overflows (continuing), scale 2^16 -> 2^0, first: w (1 NaN, first at 2)`.
///   So a job killed in the middle of a NaN run leaves lines about it.
/// - The fallback to FP32 writes its own line at once (after the pending summary), since it
///   changes how the run continues: `step 40: fell back to FP32 (scale 1 from now on)`.
/// - The scale reaching its minimum (StepEvent::MinLossScale, filled by front ends whose scaler
///   has one) writes its own line at once, after the pending summary, the first step it gets
///   there: `step 37: scale reached its minimum 2^0`. It writes again only after the scale has
///   left the minimum.
///
/// - A step whose index is lower than the pending line's last step (the run rolled back to a
///   checkpoint, or SetStepIndex()) writes the pending line first, so no line mixes the steps
///   before and after the rollback.
///
/// A scale that is a power of two prints as `2^k`. "first" names the first overflowing gradient
/// of the first overflow step of the line (its ranks follow when they are not just rank 0), and
/// `and N more` counts the other gradients of that step's report.
/// Lines go to a std::ostream (each followed by '\n' and flushed, so a tail of the log file
/// sees it at once) or to a callback (without it). Not thread-safe; register one logger on one
/// front end.
class MLFRAMEWORK_EXPORT OverflowLogger final : public ITrainingObserver {
 public:
  /// Receives one line at a time, without a trailing newline.
  using Sink = std::function<void(std::string_view)>;

  /// Writes to @p out, which must outlive the logger. ArgumentError for a negative @p interval,
  /// and ArgumentError("out") for a stream already in a failed state (a file that could not be opened).
  explicit OverflowLogger(std::ostream& out, std::int64_t interval = 0);
  /// Writes through @p sink. ArgumentNullError("sink") for an empty function, ArgumentError for a
  /// negative @p interval.
  explicit OverflowLogger(Sink sink, std::int64_t interval = 0);
  /// Writes to @p out with @p options. ArgumentError naming the invalid option field, or "out" for
  /// a stream already in a failed state.
  OverflowLogger(std::ostream& out, const OverflowLoggerOptions& options);
  /// Writes through @p sink with @p options. ArgumentNullError("sink") for an empty function,
  /// ArgumentError naming the invalid option field.
  OverflowLogger(Sink sink, const OverflowLoggerOptions& options);
  /// Writes the pending summary (Flush()); an exception from the sink is swallowed here.
  ~OverflowLogger() override;
  OverflowLogger(const OverflowLogger&) = delete;
  OverflowLogger& operator=(const OverflowLogger&) = delete;

  /// The options in force.
  const OverflowLoggerOptions& Options() const noexcept { return options_; }
  void OnFallbackToFP32(std::int64_t step) override;
  void OnStep(const StepEvent& event) override;

  /// Writes the summary of the burst or window in progress, if any, and starts a new one.
  void Flush();
  /// Lines written so far.
  std::int64_t LinesWritten() const noexcept { return lines_; }

 private:
  // The steps one pending line summarises.
  struct Pending {
    std::int64_t first_step = 0;
    std::int64_t last_step = 0;
    std::int64_t overflows = 0;
    float scale_before = 0.0f;
    float scale_after = 0.0f;
    std::string first_tensor;  // empty until an overflow step with a report
    std::chrono::steady_clock::time_point started;
  };

  void Write(const std::string& line);
  void Add(const StepEvent& event);
  void WritePending(bool continuing);
  bool ProgressDue() const;
  void NoteMinimum(const StepEvent& event);

  Sink sink_;
  OverflowLoggerOptions options_;
  std::optional<Pending> pending_;
  bool at_minimum_ = false;
  std::int64_t lines_ = 0;
};

}  // namespace mlframework
