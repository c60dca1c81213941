#pragma once
// A process group that forwards every collective to another one and counts the bytes this
// rank sends, so the demo can show what each gradient wire costs on a link.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <mlframework/distributed/IProcessGroup.hpp>

namespace fashion_mnist {

/// Bytes this rank sent, by what the collective was for.
struct SentBytes {
  double gathers = 0.0;     ///< AllGather: parameter gathers.
  double reductions = 0.0;  ///< ReduceScatter, AllToAll, AllReduce of tensors: gradient reductions.
  double other = 0.0;       ///< Broadcast and AllReduceHost: agreement checks, flags, norms.
};

/// Forwards to an inner group and adds up, per call, the bytes a direct exchange sends from this
/// rank, computed from the sizes and dtypes the call is handed (P ranks, B bytes of input):
/// AllGather B x (P - 1) (this rank's slot to every other rank); ReduceScatter and AllToAll
/// B x (P - 1) / P (the chunks that belong to the other ranks); AllReduce 2 B x (P - 1) / P (a
/// ring's reduce-scatter and all-gather); Broadcast B x (P - 1) from the root; AllReduceHost as
/// AllReduce on 8-byte doubles; Barrier nothing. Split() is not forwarded (IProcessGroup's
/// default refuses it): the demo's FullShard never splits its group.
class CountingProcessGroup final : public mlframework::distributed::IProcessGroup {
 public:
  /// Counts what @p inner sends; ArgumentNullError naming `inner` when null.
  explicit CountingProcessGroup(std::shared_ptr<IProcessGroup> inner);

  /// What was sent since construction.
  const SentBytes& Sent() const noexcept { return sent_; }

  int Rank() const noexcept override { return inner_->Rank(); }
  int WorldSize() const noexcept override { return inner_->WorldSize(); }
  std::string_view BackendName() const noexcept override { return inner_->BackendName(); }
  void AllGather(const mlframework::ITensor& input, mlframework::ITensor& output) override;
  void ReduceScatter(const mlframework::ITensor& input, mlframework::ITensor& output,
                     mlframework::distributed::ReduceOp op) override;
  void AllReduce(mlframework::ITensor& tensor, mlframework::distributed::ReduceOp op) override;
  void AllToAll(const mlframework::ITensor& input, mlframework::ITensor& output) override;
  void Broadcast(mlframework::ITensor& tensor, int root) override;
  void Barrier() override { inner_->Barrier(); }
  void AllReduceHost(std::span<double> values, mlframework::distributed::ReduceOp op) override;
  using IProcessGroup::AllReduceHost;
  void Abort(const std::string& message) noexcept override { inner_->Abort(message); }
  mlframework::distributed::CollectiveRequestPtr AllGatherAsync(const mlframework::ITensor& input,
                                                                mlframework::ITensor& output) override;
  mlframework::distributed::CollectiveRequestPtr ReduceScatterAsync(const mlframework::ITensor& input,
                                                                    mlframework::ITensor& output,
                                                                    mlframework::distributed::ReduceOp op) override;
  mlframework::distributed::CollectiveRequestPtr AllReduceAsync(mlframework::ITensor& tensor,
                                                                mlframework::distributed::ReduceOp op) override;
  mlframework::distributed::CollectiveRequestPtr AllGatherAsyncAfter(std::function<void()> prepare,
                                                                     const mlframework::ITensor& input,
                                                                     mlframework::ITensor& output) override;
  mlframework::distributed::CollectiveRequestPtr ReduceScatterAsyncThen(const mlframework::ITensor& input,
                                                                        mlframework::ITensor& output,
                                                                        mlframework::distributed::ReduceOp op,
                                                                        std::function<void()> finish) override;

 private:
  // B x (P - 1): a gather of @p input.
  void CountGather(const mlframework::ITensor& input);
  // B x (P - 1) / P: a reduce-scatter or all-to-all of @p input.
  void CountScatter(const mlframework::ITensor& input);
  // 2 B x (P - 1) / P: an all-reduce of @p tensor.
  void CountAllReduce(const mlframework::ITensor& tensor);

  std::shared_ptr<IProcessGroup> inner_;
  SentBytes sent_;
};

}  // namespace fashion_mnist
