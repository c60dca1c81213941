#pragma once
// Private: the observers registered on a front end and the one order in which a step's events
// reach them (ITrainingObserver's class notes).

#include <memory>
#include <span>
#include <vector>

#include <mlframework/core/ITensor.hpp>

#include <mlframework/core/ITrainingObserver.hpp>

namespace mlframework::detail {

/// What a front end decided on one step, handed to NotifyObservers().
struct StepNotice {
  StepEvent Event;               ///< Step, scales, skipped, norm and the overflow report.
  bool FellBack = false;         ///< The auto-fallback to FP32 happened on this step.
  bool Clipped = false;          ///< The gradients were clipped ...
  float NormBeforeClipping = 0;  ///< ... from this norm ...
  float ClipCoefficient = 1.0f;  ///< ... by this coefficient.
};

/// A front end's observers, in registration order; empty() is the one test a front end makes
/// on a step without observers. (A plain vector, so front ends keep it by value in public
/// headers and stay copyable.)
using Observers = std::vector<std::shared_ptr<ITrainingObserver>>;

/// Registers @p observer in @p list (ArgumentNullError "observer" for null, ArgumentError when it
/// is already registered; the list is unchanged on error).
void AddObserver(Observers& list, std::shared_ptr<ITrainingObserver> observer);
/// Unregisters @p observer; false when it was not registered. ArgumentNullError for null.
bool RemoveObserver(Observers& list, const std::shared_ptr<ITrainingObserver>& observer);
/// Sends @p notice's callbacks in ITrainingObserver's order to every observer of @p list when it
/// starts; an exception from one is kept and the others still run, then the first is rethrown.
/// The observers get a copy of the event's report, so one that calls the front end (which may
/// clear or replace the report) leaves the others a valid one.
void NotifyObservers(const Observers& list, const StepNotice& notice);

/// True when every tensor of @p gradients keeps its scaling state in host memory (CPU and user
/// tensors): an overflow report of them costs no device synchronisation, so front ends build it
/// on every overflow step. On a device they build it only with an observer registered, so a
/// step keeps the synchronisations the front ends document.
bool ReportCostsNoWait(const GradientMap& gradients) noexcept;
/// The same for a list (null entries ignored).
bool ReportCostsNoWait(std::span<const TensorPtr> tensors) noexcept;

}  // namespace mlframework::detail
