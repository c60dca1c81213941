#include "mlframework/distributed/Agreement.hpp"

#include <algorithm>
#include <vector>

#include <mlframework/core/Error.hpp>

namespace mlframework::distributed::detail {

namespace {
enum Kind : int { kNone = 0, kArgument = 1, kInvalidOperation = 2, kOther = 3 };
}  // namespace

LocalCheck::LocalCheck(IProcessGroup& group, const std::function<void()>& check) {
  int kind = kNone;
  try {
    check();
  } catch (const ArgumentError&) {
    error_ = std::current_exception();
    kind = kArgument;
  } catch (const InvalidOperationError&) {
    error_ = std::current_exception();
    kind = kInvalidOperation;
  } catch (...) {
    error_ = std::current_exception();
    kind = kOther;
  }
  kind_ = static_cast<double>(kind);
  rank_ = kind == kNone ? 0.0 : group.Rank() + 1.0;  // MAX gives every rank the same verdict
}

void LocalCheck::Throw(double kind, double rank, const std::string& what) const {
  if (error_) std::rethrow_exception(error_);
  if (static_cast<int>(kind) == kNone) return;
  const std::string message = what + ": rejected on rank " + std::to_string(static_cast<int>(rank) - 1) +
                              " (see its message); every rank stops here together";
  switch (static_cast<int>(kind)) {
    case kArgument:
      throw ArgumentError("parameters", message);
    case kInvalidOperation:
      throw InvalidOperationError(message);
    default:
      throw CommunicationError(message);
  }
}

void AgreeOn(IProcessGroup& group, const std::string& what, const std::function<void()>& check,
             std::span<double> extra) {
  const LocalCheck local(group, check);
  // [kind, failing rank + 1, extra...]: one all-reduce MAX.
  std::vector<double> verdict{local.Kind(), local.Rank()};
  verdict.insert(verdict.end(), extra.begin(), extra.end());
  group.AllReduceHost(verdict, ReduceOp::Max);
  local.Throw(verdict[0], verdict[1], what);
  std::copy(verdict.begin() + 2, verdict.end(), extra.begin());
}

void AgreeOn(IProcessGroup& group, const std::string& what, const std::function<void()>& check) {
  AgreeOn(group, what, check, {});
}

}  // namespace mlframework::distributed::detail
