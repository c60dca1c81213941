#include <mlframework/core/OverflowLogger.hpp>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <utility>

#include <mlframework/core/Error.hpp>

namespace mlframework {

namespace {

std::int64_t CheckedInterval(std::int64_t interval) {
  if (interval < 0) {
    throw ArgumentError("interval", "must be >= 0 (0: one line per burst), got " + std::to_string(interval));
  }
  return interval;
}

// "2^16" for powers of two (the usual dynamic scales), else "%g".
std::string FormatScale(float scale) {
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
    : sink_([&out](std::string_view line) { out << line << '\n'; }), interval_(CheckedInterval(interval)) {}

OverflowLogger::OverflowLogger(Sink sink, std::int64_t interval)
    : sink_(std::move(sink)), interval_(CheckedInterval(interval)) {
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

void OverflowLogger::Flush() {
  if (!pending_) {
    return;
  }
  const Pending done = *std::move(pending_);
  pending_.reset();  // first: a throwing sink must not see the same summary twice
  std::string line = done.first_step == done.last_step
                         ? "step " + std::to_string(done.first_step)
                         : "steps " + std::to_string(done.first_step) + "-" + std::to_string(done.last_step);
  line += ": " + std::to_string(done.overflows) + (done.overflows == 1 ? " overflow" : " overflows");
  line += ", scale " + FormatScale(done.scale_before) + " -> " + FormatScale(done.scale_after);
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
                       .first_tensor = {}};
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

void OverflowLogger::OnStep(const StepEvent& event) {
  const bool overflow = event.Skipped || event.Overflow != nullptr;
  if (interval_ == 0) {
    if (overflow) {
      Add(event);
    } else {
      Flush();  // a clean step ends the burst
    }
    return;
  }
  if (pending_ && event.Step / interval_ != pending_->first_step / interval_) {
    Flush();  // the step belongs to a later window
  }
  Add(event);
}

void OverflowLogger::OnFallbackToFP32(std::int64_t step) {
  Flush();
  Write("step " + std::to_string(step) + ": fell back to FP32 (scale 1 from now on)");
}

}  // namespace mlframework
