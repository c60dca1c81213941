#include <mlframework/core/OverflowLogger.hpp>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <utility>

#include <mlframework/core/Error.hpp>

namespace mlframework {

namespace {

const OverflowLoggerOptions& Checked(const OverflowLoggerOptions& options) {
  if (options.Interval < 0) {
    throw ArgumentError("interval", "must be >= 0 (0: one line per burst), got " + std::to_string(options.Interval));
  }
  if (options.ProgressSteps < 1) {
    throw ArgumentError("options.ProgressSteps", "must be >= 1, got " + std::to_string(options.ProgressSteps));
  }
  if (!(std::isfinite(options.ProgressSeconds) && options.ProgressSeconds > 0.0)) {
    throw ArgumentError("options.ProgressSeconds",
                        "must be finite and > 0, got " + std::to_string(options.ProgressSeconds));
  }
  return options;
}

OverflowLoggerOptions WithInterval(std::int64_t interval) {
  OverflowLoggerOptions options;
  options.Interval = interval;
  return options;
}

// Each line reaches the stream at once: a log read while the run goes on (or after it was
// killed) must already hold it. A stream that has already failed (a log file that could not be
// opened) would drop every line unseen, so it is refused.
OverflowLogger::Sink StreamSink(std::ostream& out) {
  if (out.fail()) {
    throw ArgumentError("out",
                        "is a stream in a failed state (a log file that could not be opened?): every line "
                        "would be lost");
  }
  return [&out](std::string_view line) { out << line << '\n' << std::flush; };
}

// "2^16" for powers of two (the usual dynamic scales), else "%g".
std::string FormatPowerOfTwoScale(float scale) {
  int exponent = 0;
  if (scale > 0.0f && std::isfinite(scale) && std::frexp(scale, &exponent) == 0.5f) {
    return "2^" + std::to_string(exponent - 1);
  }
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(scale));
  return text;
}

std::string FirstTensor(const OverflowReport& report) {
  if (report.Tensors.empty()) {
    return {};
  }
  std::string text = report.Tensors.front().ToString();
  if (report.Tensors.size() > 1) {
    text += " and " + std::to_string(report.Tensors.size() - 1) + " more";
  }
  if (!(report.Ranks.size() == 1 && report.Ranks.front() == 0)) {
    text += " on rank";
    text += report.Ranks.size() == 1 ? " " : "s ";
    for (std::size_t i = 0; i < report.Ranks.size(); ++i) {
      if (i != 0) {
        text += ',';
      }
      text += std::to_string(report.Ranks[i]);
    }
  }
  return text;
}

}  // namespace

OverflowLogger::OverflowLogger(std::ostream& out, std::int64_t interval)
    : OverflowLogger(StreamSink(out), WithInterval(interval)) {}

OverflowLogger::OverflowLogger(Sink sink, std::int64_t interval)
    : OverflowLogger(std::move(sink), WithInterval(interval)) {}

OverflowLogger::OverflowLogger(std::ostream& out, const OverflowLoggerOptions& options)
    : OverflowLogger(StreamSink(out), options) {}

OverflowLogger::OverflowLogger(Sink sink, const OverflowLoggerOptions& options)
    : sink_(std::move(sink)), options_(Checked(options)) {
  if (!sink_) {
    throw ArgumentNullError("sink");
  }
}

OverflowLogger::~OverflowLogger() {
  try {
    Flush();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw; the line is lost
  }
}

void OverflowLogger::Write(const std::string& line) {
  sink_(line);
  ++lines_;
}

void OverflowLogger::Flush() { WritePending(false); }

void OverflowLogger::WritePending(bool continuing) {
  if (!pending_) {
    return;
  }
  const Pending done = *std::move(pending_);
  pending_.reset();  // first: a throwing sink must not see the same summary twice
  std::string line = done.first_step == done.last_step
                         ? "step " + std::to_string(done.first_step)
                         : "steps " + std::to_string(done.first_step) + "-" + std::to_string(done.last_step);
  line += ": " + std::to_string(done.overflows) + (done.overflows == 1 ? " overflow" : " overflows");
  if (continuing) {
    line += " (continuing)";
  }
  line += ", scale " + FormatPowerOfTwoScale(done.scale_before) + " -> " + FormatPowerOfTwoScale(done.scale_after);
  if (!done.first_tensor.empty()) {
    line += ", first: " + done.first_tensor;
  }
  Write(line);
}

void OverflowLogger::Add(const StepEvent& event) {
  if (!pending_) {
    pending_ = Pending{.first_step = event.Step,
                       .last_step = event.Step,
                       .overflows = 0,
                       .scale_before = event.LossScale,
                       .scale_after = event.NewLossScale,
                       .first_tensor = {},
                       .started = std::chrono::steady_clock::now()};
  }
  Pending& p = *pending_;
  p.last_step = event.Step;
  p.scale_after = event.NewLossScale;
  if (event.Skipped || event.Overflow != nullptr) {
    ++p.overflows;
    if (p.first_tensor.empty() && event.Overflow != nullptr) {
      p.first_tensor = FirstTensor(*event.Overflow);
    }
  }
}

bool OverflowLogger::ProgressDue() const {
  if (!pending_ || pending_->overflows == 0) {
    return false;  // only a summary with overflows in it is urgent
  }
  // A window of at most ProgressSteps steps is written by the window rule in time; only the
  // clock can make it late.
  const bool window_is_short = options_.Interval > 0 && options_.Interval <= options_.ProgressSteps;
  const bool by_steps = pending_->last_step - pending_->first_step + 1 >= options_.ProgressSteps;
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - pending_->started;
  return (by_steps && !window_is_short) || elapsed.count() >= options_.ProgressSeconds;
}

void OverflowLogger::NoteMinimum(const StepEvent& event) {
  const bool at_minimum = event.MinLossScale.has_value() && event.NewLossScale <= *event.MinLossScale;
  if (at_minimum && !at_minimum_) {
    Flush();
    at_minimum_ = true;
    Write("step " + std::to_string(event.Step) + ": scale reached its minimum " +
          FormatPowerOfTwoScale(event.NewLossScale));
    return;
  }
  at_minimum_ = at_minimum;
}

void OverflowLogger::OnStep(const StepEvent& event) {
  const bool overflow = event.Skipped || event.Overflow != nullptr;
  const std::int64_t interval = options_.Interval;
  if (pending_ && event.Step < pending_->last_step) {
    Flush();  // the step index went back (a checkpoint reloaded): the pending line's steps end here
  }
  if (interval == 0) {
    if (overflow) {
      Add(event);
    } else {
      Flush();  // a clean step ends the burst
    }
  } else {
    if (pending_ && event.Step / interval != pending_->first_step / interval) {
      Flush();  // the step belongs to a later window
    }
    Add(event);
  }
  if (ProgressDue()) {
    WritePending(true);
  }
  NoteMinimum(event);
}

void OverflowLogger::OnFallbackToFP32(std::int64_t step) {
  Flush();
  Write("step " + std::to_string(step) + ": fell back to FP32 (scale 1 from now on)");
}

}  // namespace mlframework
