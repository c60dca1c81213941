#include "mlframework/distributed/Agreement.hpp"

#include <array>

#include <mlframework/core/Error.hpp>

namespace mlframework::distributed::detail {

namespace {
enum Kind : int { kNone = 0, kArgument = 1, kInvalidOperation = 2, kOther = 3 };
}  // namespace

void AgreeOn(IProcessGroup& group, const std::string& what, const std::function<void()>& check) {
  std::exception_ptr error;
  int kind = kNone;
  try {
    check();
  } catch (const ArgumentError&) {
    error = std::current_exception();
    kind = kArgument;
  } catch (const InvalidOperationError&) {
    error = std::current_exception();
    kind = kInvalidOperation;
  } catch (...) {
    error = std::current_exception();
    kind = kOther;
  }
  // [kind, failing rank + 1]: MAX gives every rank the same verdict.
  std::array<double, 2> verdict{static_cast<double>(kind), kind == kNone ? 0.0 : group.Rank() + 1.0};
  group.AllReduceHost(verdict, ReduceOp::Max);
  if (error) std::rethrow_exception(error);
  if (static_cast<int>(verdict[0]) == kNone) return;
  const std::string message = what + ": rejected on rank " + std::to_string(static_cast<int>(verdict[1]) - 1) +
                              " (see its message); every rank stops here together";
  switch (static_cast<int>(verdict[0])) {
    case kArgument:
      throw ArgumentError("parameters", message);
    case kInvalidOperation:
      throw InvalidOperationError(message);
    default:
      throw CommunicationError(message);
  }
}

}  // namespace mlframework::distributed::detail
