#include <mlframework/distributed/IProcessGroup.hpp>

#include <mlframework/core/Error.hpp>

namespace mlframework::distributed {

IProcessGroup::~IProcessGroup() = default;

std::string_view ToString(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum:
      return "Sum";
    case ReduceOp::Max:
      return "Max";
  }
  return "unknown";
}

std::shared_ptr<IProcessGroup> IProcessGroup::Split(int /*color*/, int /*key*/) {
  // Deterministic for a given implementation, so every rank throws together.
  throw InvalidOperationError("the '" + std::string(BackendName()) +
                              "' process group cannot split into subgroups: implement IProcessGroup::Split");
}

double IProcessGroup::AllReduceHost(double value, ReduceOp op) {
  AllReduceHost(std::span<double>(&value, 1), op);
  return value;
}

}  // namespace mlframework::distributed
