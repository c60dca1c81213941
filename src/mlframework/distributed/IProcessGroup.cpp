#include <mlframework/distributed/IProcessGroup.hpp>

#include <memory>
#include <string>

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

CollectiveRequest::~CollectiveRequest() = default;

namespace {

// The blocking defaults below finish their collective before returning this.
class CompletedRequest final : public CollectiveRequest {
 public:
  bool Test() override { return true; }
  void Wait() override {}
};

}  // namespace

CollectiveRequestPtr MakeCompletedRequest() { return std::make_unique<CompletedRequest>(); }

CollectiveRequestPtr IProcessGroup::AllGatherAsync(const ITensor& input, ITensor& output) {
  AllGather(input, output);
  return MakeCompletedRequest();
}

CollectiveRequestPtr IProcessGroup::ReduceScatterAsync(const ITensor& input, ITensor& output, ReduceOp op) {
  ReduceScatter(input, output, op);
  return MakeCompletedRequest();
}

CollectiveRequestPtr IProcessGroup::AllReduceAsync(ITensor& tensor, ReduceOp op) {
  AllReduce(tensor, op);
  return MakeCompletedRequest();
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
