#pragma once
/// @file FSDPShardingUnit.hpp
/// @brief One sharded group of parameters (typically one layer), flattened into one buffer.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/distributed/fsdp/UnitPrecision.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed::fsdp {

class FSDP;

/// A group of named parameters that is gathered, released and reduced as one flat buffer.
///
/// Layout: the parameters, in name order, are laid end to end and zero-padded to PaddedSize(),
/// a multiple of the world size; rank r owns elements `[r * ShardSize(), (r + 1) * ShardSize())`
/// and keeps them as its FP32 master shard (LocalShard()). Under NoShard every rank keeps the
/// whole buffer.
///
/// Life of a unit in one training step:
/// 1. Gather(): the FP32 shard is cast to the parameter dtype (ParamDType(): the unit's own,
///    else the FSDP's) and all-gathered (collective).
///    GatheredParameter() is the flat buffer and Parameters() its per-parameter views, which the
///    framework uses in forward and backward.
/// 2. ReduceGradients(full_gradients): the full per-parameter gradients are flattened into the
///    reduce dtype and reduce-scattered (collective), averaged over ranks, into LocalGradient(),
///    this rank's FP32 gradient shard. Called again before a step, it accumulates.
/// 3. Release(): the gathered buffer is dropped and its memory goes back to the FSDP's buffer
///    cache, where the next unit's Gather() reuses it (FSDP::CachedBufferBytes()); if the
///    framework still holds a view of it, the memory stays the framework's and is freed when
///    the last view goes, never reused under it.
///
/// No per-call allocation once warm: the gathered buffer, the flat gradient buffer and the
/// scratch shards come from that cache, the FP32 shard is cast straight into this rank's slot
/// of the gathered buffer (all-gather in place), and a unit of one FP32 parameter whose size is
/// a multiple of the world size is reduce-scattered straight from the framework's gradient.
///
/// Every buffer of a unit (shard, gathered buffer and views, gradient shard, scratch) lives on
/// the device of the parameters it was registered with; on a device other than the CPU all of
/// the above runs as queued work of the parameters' backend (TensorBackend::CopyInto, AddInto)
/// and never waits for the device.
///
/// Units are created by FSDP::RegisterUnit(). State checks (gathering twice, reducing before
/// gathering) are agreed across ranks before any communication, so every rank throws together.
class MLFRAMEWORK_EXPORT FSDPShardingUnit {
 public:
  ~FSDPShardingUnit();
  /// Not copyable: it owns shards.
  FSDPShardingUnit(const FSDPShardingUnit&) = delete;
  /// Not assignable.
  FSDPShardingUnit& operator=(const FSDPShardingUnit&) = delete;

  /// Name given at registration.
  const std::string& Name() const noexcept;
  /// Parameter names in layout order.
  const std::vector<std::string>& ParameterNames() const noexcept;
  /// Shape of parameter @p name; ArgumentError for an unknown name.
  const Shape& ParameterShape(const std::string& name) const;
  /// Elements of all parameters together (without padding).
  std::size_t NumElements() const noexcept;
  /// Flat buffer size: NumElements() rounded up to a multiple of the world size (sharded strategies).
  std::size_t PaddedSize() const noexcept;
  /// Elements this rank owns (PaddedSize() / world size; the whole buffer under NoShard).
  std::size_t ShardSize() const noexcept;
  /// First flat element this rank owns.
  std::size_t ShardOffset() const noexcept;

  /// This rank's FP32 master shard (what the optimizer updates in place), on the parameters' device.
  TensorPtr LocalShard() const noexcept;

  /// The unit's own precision policy as registered (unset fields follow the FSDP).
  const UnitPrecision& Precision() const noexcept;
  /// The dtype the next Gather() produces: the unit's own ParamDType, else the FSDP's current one.
  DataType ParamDType() const noexcept;
  /// The dtype ReduceGradients() reduces in: the unit's own ReduceDType, else the FSDP's.
  DataType ReduceDType() const noexcept;

  /// All-gathers the unit in the parameter dtype (collective). InvalidOperationError on every
  /// rank when any rank already has it gathered.
  void Gather();
  /// Drops the gathered buffer and returns its memory to the FSDP's buffer cache (unless a view
  /// of it is still held elsewhere). InvalidOperationError when not gathered (local, no
  /// communication).
  void Release();
  /// True between Gather() and Release().
  bool IsGathered() const noexcept;
  /// The gathered flat buffer (PaddedSize() elements), or null when not gathered.
  TensorPtr GatheredParameter() const noexcept;
  /// Replaces the gathered flat buffer (the spec's setter, used by FSDPAmpIntegration) and
  /// rebuilds the views. InvalidOperationError when not gathered; ArgumentNullError for null;
  /// ArgumentError unless it is a tensor of PaddedSize() elements on the parameters' device (a
  /// CPU tensor for CPU parameters, otherwise a tensor of the parameters' backend).
  void SetGatheredParameter(TensorPtr gathered);
  /// Per-parameter views into GatheredParameter() (name to tensor of the parameter's shape).
  /// Treat them as read-only: under NoShard with an FP32 parameter dtype they alias the FP32
  /// master weights (no copy), and under ShardGradOp the buffer is kept until the next step.
  /// InvalidOperationError when not gathered.
  const GradientMap& Parameters() const;

  /// Reduce-scatters the full gradients of this unit's parameters (collective): every name of
  /// ParameterNames() with a tensor of its shape, any dtype. The result, averaged over ranks,
  /// is added to LocalGradient(). FP32 reductions are averaged after the sum (on the shard),
  /// FP16/BF16 ones before it (away from overflow). InvalidOperationError on every rank when any rank has not
  /// gathered the unit; ArgumentError on every rank for missing names or wrong shapes.
  /// Without gradient sync (FSDP::SetRequiresGradientSync(false)) it communicates nothing: the
  /// gradients are added in FP32 to a local full-unit sum (the same checks, raised on this rank
  /// only), which the next call with sync adds its gradients to and reduce-scatters once.
  void ReduceGradients(const GradientMap& gradients);
  /// This rank's gradient shard (ShardSize() elements, FP32), or null before ReduceGradients().
  TensorPtr LocalGradient() const noexcept;
  /// True while the unit holds gradients summed without gradient sync
  /// (FSDP::SetRequiresGradientSync(false)) that no ReduceGradients() with sync has reduced yet.
  bool HasUnsyncedGradients() const noexcept;
  /// Replaces the gradient shard (the spec's setter, used by FSDPAmpIntegration).
  /// ArgumentNullError for null; ArgumentError unless it has ShardSize() elements.
  void SetLocalGradient(TensorPtr gradient);
  /// Drops the gradient shard (after a step or a skipped step) and any unsynced sum. Its FP32
  /// buffer is reused by the next ReduceGradients(), so a reference kept from LocalGradient()
  /// sees the next values.
  void ZeroGrad() noexcept;

 private:
  friend class FSDP;
  struct Impl;
  explicit FSDPShardingUnit(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlframework::distributed::fsdp
