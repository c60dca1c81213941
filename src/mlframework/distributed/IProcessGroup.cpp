#include <mlframework/distributed/IProcessGroup.hpp>

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

double IProcessGroup::AllReduceHost(double value, ReduceOp op) {
  AllReduceHost(std::span<double>(&value, 1), op);
  return value;
}

}  // namespace mlframework::distributed
