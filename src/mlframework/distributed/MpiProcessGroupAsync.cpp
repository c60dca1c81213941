// MpiProcessGroup's non-blocking forms: host tensors go to the group's MpiAsyncEngine, staged
// ones take the blocking defaults of IProcessGroup.
#include <mlframework/distributed/MpiProcessGroup.hpp>

#include <functional>
#include <utility>

#include "mlframework/distributed/MpiAsync.hpp"

namespace mlframework::distributed {

CollectiveRequestPtr MpiProcessGroup::AllGatherAsync(const ITensor& input, ITensor& output) {
  if (!detail::MpiAsyncEngine::Stageless(input, output)) return IProcessGroup::AllGatherAsync(input, output);
  return AsyncEngine().AllGather(input, output);
}

CollectiveRequestPtr MpiProcessGroup::ReduceScatterAsync(const ITensor& input, ITensor& output, ReduceOp op) {
  if (!detail::MpiAsyncEngine::Stageless(input, output)) return IProcessGroup::ReduceScatterAsync(input, output, op);
  return AsyncEngine().ReduceScatter(input, output, op);
}

CollectiveRequestPtr MpiProcessGroup::AllGatherAsyncAfter(std::function<void()> prepare, const ITensor& input,
                                                          ITensor& output) {
  if (!detail::MpiAsyncEngine::Stageless(input, output)) {
    return IProcessGroup::AllGatherAsyncAfter(std::move(prepare), input, output);
  }
  return AsyncEngine().AllGather(input, output, std::move(prepare));
}

CollectiveRequestPtr MpiProcessGroup::ReduceScatterAsyncThen(const ITensor& input, ITensor& output, ReduceOp op,
                                                             std::function<void()> finish) {
  if (!detail::MpiAsyncEngine::Stageless(input, output)) {
    return IProcessGroup::ReduceScatterAsyncThen(input, output, op, std::move(finish));
  }
  return AsyncEngine().ReduceScatter(input, output, op, std::move(finish));
}

CollectiveRequestPtr MpiProcessGroup::AllReduceAsync(ITensor& tensor, ReduceOp op) {
  if (!detail::MpiAsyncEngine::Stageless(tensor, tensor)) return IProcessGroup::AllReduceAsync(tensor, op);
  return AsyncEngine().AllReduce(tensor, op);
}

}  // namespace mlframework::distributed
