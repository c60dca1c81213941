#pragma once
/// @file LocalProcessGroup.hpp
/// @brief The single-process group (world size 1): the embedded default.

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed {

/// A group of one rank, so FSDP code runs unchanged in one process.
///
/// Collectives are local copies (all-gather and reduce-scatter copy the input, all-reduce and
/// broadcast leave the tensor unchanged) with the same argument checks as the real engines.
class MLFRAMEWORK_EXPORT LocalProcessGroup final : public IProcessGroup {
 public:
  /// A group of world size 1.
  LocalProcessGroup() = default;
  ~LocalProcessGroup() override;

  /// Always 0.
  int Rank() const noexcept override;
  /// Always 1.
  int WorldSize() const noexcept override;
  /// "local".
  std::string_view BackendName() const noexcept override;
  void AllGather(const ITensor& input, ITensor& output) override;
  void ReduceScatter(const ITensor& input, ITensor& output, ReduceOp op = ReduceOp::Sum) override;
  void AllReduce(ITensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  /// Copies @p input into @p output (one rank: its one chunk comes back to it).
  void AllToAll(const ITensor& input, ITensor& output) override;
  void Broadcast(ITensor& tensor, int root = 0) override;
  void Barrier() override;
  void AllReduceHost(std::span<double> values, ReduceOp op) override;
  using IProcessGroup::AllReduceHost;
  /// A new LocalProcessGroup (a group of one splits into itself); ArgumentError for a negative @p color.
  std::shared_ptr<IProcessGroup> Split(int color, int key) override;
  /// Prints the message and calls std::abort().
  void Abort(const std::string& message) noexcept override;
};

/// A shared LocalProcessGroup.
MLFRAMEWORK_EXPORT std::shared_ptr<IProcessGroup> MakeLocalProcessGroup();

}  // namespace mlframework::distributed
