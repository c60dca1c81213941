#pragma once
// An ITrainingObserver for tests: every callback appended to `events` as one short string, and
// the reports and step events kept; optionally it throws from one callback.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <mlframework/core/ITrainingObserver.hpp>

namespace mlfw_test {

class RecordingObserver final : public mlframework::ITrainingObserver {
 public:
  // Throws std::runtime_error(@p message) from the callback named @p throw_in ("overflow",
  // "skipped", "backoff", "growth", "fallback", "clip", "step"); empty: never.
  explicit RecordingObserver(std::string throw_in = {}, std::string message = "observer failed")
      : throw_in_(std::move(throw_in)), message_(std::move(message)) {}

  void OnOverflow(const mlframework::OverflowReport& report) override {
    reports.push_back(report);
    Record("overflow " + std::to_string(report.Step));
  }
  void OnSkippedStep(std::int64_t step, float scale) override {
    Record("skipped " + std::to_string(step) + " " + Number(scale));
  }
  void OnScaleGrowth(std::int64_t step, float old_scale, float new_scale) override {
    Record("growth " + std::to_string(step) + " " + Number(old_scale) + "->" + Number(new_scale));
  }
  void OnScaleBackoff(std::int64_t step, float old_scale, float new_scale) override {
    Record("backoff " + std::to_string(step) + " " + Number(old_scale) + "->" + Number(new_scale));
  }
  void OnFallbackToFP32(std::int64_t step) override { Record("fallback " + std::to_string(step)); }
  void OnClipping(std::int64_t step, float norm, float coefficient) override {
    clip_norms.push_back(norm);
    clip_coefficients.push_back(coefficient);
    Record("clip " + std::to_string(step));
  }
  void OnStep(const mlframework::StepEvent& event) override {
    steps.push_back(event);
    steps.back().Overflow = nullptr;  // the report is only valid during the call
    Record("step " + std::to_string(event.Step) + (event.Skipped ? " skipped" : ""));
  }

  std::vector<std::string> events;
  std::vector<mlframework::OverflowReport> reports;
  std::vector<mlframework::StepEvent> steps;
  std::vector<float> clip_norms;
  std::vector<float> clip_coefficients;

 private:
  static std::string Number(float value) {
    std::string text = std::to_string(value);
    text.erase(text.find_last_not_of('0') + 1);
    if (!text.empty() && text.back() == '.') text.pop_back();
    return text;
  }
  void Record(const std::string& event) {
    events.push_back(event);
    if (!throw_in_.empty() && event.rfind(throw_in_, 0) == 0) {
      throw std::runtime_error(message_);
    }
  }
  std::string throw_in_;
  std::string message_;
};

}  // namespace mlfw_test
