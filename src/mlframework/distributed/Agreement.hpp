#pragma once
// Private: checks agreed across ranks. A check whose outcome could differ between ranks runs
// locally, then one all-reduce tells every rank whether any rank failed, so all ranks throw
// together (the failing rank its own exception, the others the same type naming that rank)
// instead of some ranks entering a collective the others never reach.

#include <exception>
#include <functional>
#include <span>
#include <string>

#include <mlframework/distributed/IProcessGroup.hpp>

namespace mlframework::distributed::detail {

// Runs @p check; when it throws on any rank, throws on every rank. @p what names the operation.
void AgreeOn(IProcessGroup& group, const std::string& what, const std::function<void()>& check);

// AgreeOn() with @p extra (host values the caller wants reduced with MAX) carried in the same
// all-reduce; on return @p extra holds the agreed values (nothing agreed when it throws).
void AgreeOn(IProcessGroup& group, const std::string& what, const std::function<void()>& check,
             std::span<double> extra);

// AgreeOn() in halves, for a check whose verdict rides in an all-reduce MAX the caller runs
// anyway: Run() runs the check and keeps its error; Values() are the two values to reduce with
// MAX; Throw() throws, after the reduction, on every rank when any rank failed.
class LocalCheck {
 public:
  LocalCheck(IProcessGroup& group, const std::function<void()>& check);
  bool Failed() const noexcept { return error_ != nullptr; }
  double Kind() const noexcept { return kind_; }
  double Rank() const noexcept { return rank_; }
  // Throws this rank's error, or (@p kind, @p rank being the agreed MAX of Kind() and Rank())
  // the same type naming the failing rank; returns when no rank failed.
  void Throw(double kind, double rank, const std::string& what) const;

 private:
  std::exception_ptr error_;
  double kind_ = 0.0;
  double rank_ = 0.0;
};

}  // namespace mlframework::distributed::detail
