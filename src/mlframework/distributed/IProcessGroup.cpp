#include <mlframework/distributed/IProcessGroup.hpp>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>

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

// ReduceScatterAsyncThen()'s default: the started collective, and the local work that follows it
// on the thread that first finds it complete.
class ThenRequest final : public CollectiveRequest {
 public:
  ThenRequest(CollectiveRequestPtr inner, std::function<void()> finish)
      : inner_(std::move(inner)), finish_(std::move(finish)) {}
  ~ThenRequest() override = default;  // inner_'s destructor completes the collective
  ThenRequest(const ThenRequest&) = delete;
  ThenRequest& operator=(const ThenRequest&) = delete;

  bool Test() override {
    if (!finished_ && !inner_->Test()) return false;
    Finish();
    return true;
  }
  void Wait() override {
    if (!finished_) inner_->Wait();
    Finish();
  }

 private:
  // Runs the work once; its failure is thrown again by every later Wait() and Test().
  void Finish() {
    if (!finished_) {
      finished_ = true;
      try {
        if (finish_) finish_();
      } catch (...) {
        error_ = std::current_exception();
      }
      finish_ = nullptr;
    }
    if (error_) std::rethrow_exception(error_);
  }

  CollectiveRequestPtr inner_;
  std::function<void()> finish_;
  bool finished_ = false;
  std::exception_ptr error_;
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

// By value, as the engines that keep @p prepare for their progress thread take it.
CollectiveRequestPtr IProcessGroup::AllGatherAsyncAfter(
    std::function<void()> prepare,  // NOLINT(performance-unnecessary-value-param)
    const ITensor& input, ITensor& output) {
  if (prepare) prepare();
  return AllGatherAsync(input, output);
}

CollectiveRequestPtr IProcessGroup::ReduceScatterAsyncThen(const ITensor& input, ITensor& output, ReduceOp op,
                                                           std::function<void()> finish) {
  return std::make_unique<ThenRequest>(ReduceScatterAsync(input, output, op), std::move(finish));
}

std::shared_ptr<IProcessGroup> IProcessGroup::Split(int /*color*/, int /*key*/) {
  // Deterministic for a given implementation, so every rank throws together.
  throw InvalidOperationError("the '" + std::string(BackendName()) +
                              "' process group cannot split into subgroups: implement IProcessGroup::Split");
}

void IProcessGroup::AllToAll(const ITensor& /*input*/, ITensor& /*output*/) {
  // Deterministic for a given implementation, so every rank throws together.
  throw InvalidOperationError("the '" + std::string(BackendName()) +
                              "' process group has no all-to-all: implement IProcessGroup::AllToAll");
}

double IProcessGroup::AllReduceHost(double value, ReduceOp op) {
  AllReduceHost(std::span<double>(&value, 1), op);
  return value;
}

}  // namespace mlframework::distributed
