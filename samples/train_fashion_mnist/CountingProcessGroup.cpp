#include "CountingProcessGroup.hpp"

#include <utility>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Error.hpp>

namespace fashion_mnist {

namespace {

double Bytes(const mlframework::ITensor& tensor) {
  return static_cast<double>(tensor.Size() * mlframework::ElementSize(tensor.GetDataType()));
}

}  // namespace

namespace dist = mlframework::distributed;

CountingProcessGroup::CountingProcessGroup(std::shared_ptr<IProcessGroup> inner) : inner_(std::move(inner)) {
  if (inner_ == nullptr) {
    throw mlframework::ArgumentNullError("inner");
  }
}

void CountingProcessGroup::CountGather(const mlframework::ITensor& input) {
  sent_.gathers += Bytes(input) * (WorldSize() - 1);
}

void CountingProcessGroup::CountScatter(const mlframework::ITensor& input) {
  sent_.reductions += Bytes(input) * (WorldSize() - 1) / WorldSize();
}

void CountingProcessGroup::CountAllReduce(const mlframework::ITensor& tensor) {
  sent_.reductions += 2.0 * Bytes(tensor) * (WorldSize() - 1) / WorldSize();
}

void CountingProcessGroup::AllGather(const mlframework::ITensor& input, mlframework::ITensor& output) {
  CountGather(input);
  inner_->AllGather(input, output);
}

void CountingProcessGroup::ReduceScatter(const mlframework::ITensor& input, mlframework::ITensor& output,
                                         dist::ReduceOp op) {
  CountScatter(input);
  inner_->ReduceScatter(input, output, op);
}

void CountingProcessGroup::AllReduce(mlframework::ITensor& tensor, dist::ReduceOp op) {
  CountAllReduce(tensor);
  inner_->AllReduce(tensor, op);
}

void CountingProcessGroup::AllToAll(const mlframework::ITensor& input, mlframework::ITensor& output) {
  CountScatter(input);
  inner_->AllToAll(input, output);
}

void CountingProcessGroup::Broadcast(mlframework::ITensor& tensor, int root) {
  sent_.other += Rank() == root ? Bytes(tensor) * (WorldSize() - 1) : 0.0;
  inner_->Broadcast(tensor, root);
}

void CountingProcessGroup::AllReduceHost(std::span<double> values, dist::ReduceOp op) {
  sent_.other += 2.0 * static_cast<double>(values.size_bytes()) * (WorldSize() - 1) / WorldSize();
  inner_->AllReduceHost(values, op);
}

dist::CollectiveRequestPtr CountingProcessGroup::AllGatherAsync(const mlframework::ITensor& input,
                                                                mlframework::ITensor& output) {
  CountGather(input);
  return inner_->AllGatherAsync(input, output);
}

dist::CollectiveRequestPtr CountingProcessGroup::ReduceScatterAsync(const mlframework::ITensor& input,
                                                                    mlframework::ITensor& output, dist::ReduceOp op) {
  CountScatter(input);
  return inner_->ReduceScatterAsync(input, output, op);
}

dist::CollectiveRequestPtr CountingProcessGroup::AllReduceAsync(mlframework::ITensor& tensor, dist::ReduceOp op) {
  CountAllReduce(tensor);
  return inner_->AllReduceAsync(tensor, op);
}

dist::CollectiveRequestPtr CountingProcessGroup::AllGatherAsyncAfter(std::function<void()> prepare,
                                                                     const mlframework::ITensor& input,
                                                                     mlframework::ITensor& output) {
  CountGather(input);
  return inner_->AllGatherAsyncAfter(std::move(prepare), input, output);
}

dist::CollectiveRequestPtr CountingProcessGroup::ReduceScatterAsyncThen(const mlframework::ITensor& input,
                                                                        mlframework::ITensor& output, dist::ReduceOp op,
                                                                        std::function<void()> finish) {
  CountScatter(input);
  return inner_->ReduceScatterAsyncThen(input, output, op, std::move(finish));
}

}  // namespace fashion_mnist
