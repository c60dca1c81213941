#include "mlframework/core/ObserverList.hpp"

#include <algorithm>
#include <exception>
#include <optional>
#include <utility>

#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/Error.hpp>

namespace mlframework::detail {

void AddObserver(Observers& list, std::shared_ptr<ITrainingObserver> observer) {
  if (!observer) {
    throw ArgumentNullError("observer");
  }
  if (std::ranges::find(list, observer) != list.end()) {
    throw ArgumentError("observer", "is already registered on this front end (it would see every event twice)");
  }
  list.push_back(std::move(observer));
}

bool RemoveObserver(Observers& list, const std::shared_ptr<ITrainingObserver>& observer) {
  if (!observer) {
    throw ArgumentNullError("observer");
  }
  const auto found = std::ranges::find(list, observer);
  if (found == list.end()) {
    return false;
  }
  list.erase(found);
  return true;
}

void NotifyObservers(const Observers& list, const StepNotice& notice) {
  // A copy: an observer may register or remove observers from inside a callback.
  const Observers observers = list;
  std::exception_ptr first;
  const auto each = [&](auto&& call) {
    for (const auto& observer : observers) {
      try {
        call(*observer);
      } catch (...) {
        if (!first) {
          first = std::current_exception();
        }
      }
    }
  };
  // The report too: it belongs to the front end, and an observer that calls it (Reset(), a new
  // step) clears or replaces it while the observers after it still read it. A copy on overflow
  // steps only.
  StepEvent event = notice.Event;
  std::optional<OverflowReport> report;
  if (event.Overflow != nullptr) {
    report = *event.Overflow;
    event.Overflow = &*report;
  }
  if (event.Overflow != nullptr) {
    each([&](ITrainingObserver& o) { o.OnOverflow(*event.Overflow); });
  }
  if (event.Skipped) {
    each([&](ITrainingObserver& o) { o.OnSkippedStep(event.Step, event.LossScale); });
  }
  if (event.NewLossScale < event.LossScale) {
    each([&](ITrainingObserver& o) { o.OnScaleBackoff(event.Step, event.LossScale, event.NewLossScale); });
  } else if (event.NewLossScale > event.LossScale) {
    each([&](ITrainingObserver& o) { o.OnScaleGrowth(event.Step, event.LossScale, event.NewLossScale); });
  }
  if (notice.FellBack) {
    each([&](ITrainingObserver& o) { o.OnFallbackToFP32(event.Step); });
  }
  if (notice.Clipped) {
    each([&](ITrainingObserver& o) { o.OnClipping(event.Step, notice.NormBeforeClipping, notice.ClipCoefficient); });
  }
  each([&](ITrainingObserver& o) { o.OnStep(event); });
  if (first) {
    std::rethrow_exception(first);
  }
}

bool ReportCostsNoWait(const GradientMap& gradients) noexcept {
  return std::ranges::all_of(
      gradients, [](const auto& entry) { return !entry.second || DeviceScalingOf(*entry.second) == nullptr; });
}

bool ReportCostsNoWait(std::span<const TensorPtr> tensors) noexcept {
  return std::ranges::all_of(tensors,
                             [](const TensorPtr& tensor) { return !tensor || DeviceScalingOf(*tensor) == nullptr; });
}

}  // namespace mlframework::detail
