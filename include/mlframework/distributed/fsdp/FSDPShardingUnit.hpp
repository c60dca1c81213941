#pragma once
/// @file FSDPShardingUnit.hpp
/// @brief One sharded group of parameters (typically one layer), flattened into one buffer.

#include <cstddef>
#include <memory>
#include <span>
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
/// a multiple of the world size (times FSDPConfig::ShardAlignment); rank r owns elements `[r * ShardSize(), (r + 1) *
/// ShardSize())` and keeps them as its master shard (LocalShard(): FP32, or BF16 under MasterDType()). Under NoShard
/// every rank keeps the whole buffer.
///
/// Life of a unit in one training step:
/// 1. Gather(): the master shard is cast to the parameter dtype (ParamDType(): the unit's own,
///    else the FSDP's) and all-gathered (collective).
///    GatheredParameter() is the flat buffer and Parameters() its per-parameter views, which the
///    framework uses in forward and backward.
/// 2. ReduceGradients(full_gradients): the full per-parameter gradients are flattened into the
///    reduce dtype and reduce-scattered (collective), averaged over ranks, into LocalGradient(),
///    this rank's FP32 gradient shard. Called again before a step, it accumulates. With the FP8
///    wire (Wire() == GradientWire::Float8Blocks) they are flattened in FP32, sent as FP8 blocks
///    and summed in FP32 (distributed/Float8BlockReduce.hpp).
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
/// the above runs as queued work of the parameters' backend (TensorBackend::Write: casts and adds)
/// and never waits for the device.
///
/// Gather() and ReduceGradients() have asynchronous forms (GatherAsync() / WaitGather(),
/// ReduceGradientsAsync() / WaitReduce()) so that communication overlaps the framework's
/// compute; FSDP's hooks (FSDP::PreForward() and friends) drive them with a bounded prefetch.
/// Every rank starts the collectives in the same order; the waits are local. A unit destroyed
/// with a collective in flight completes it first.
///
/// Units are created by FSDP::RegisterUnit(). State checks (gathering twice, reducing before
/// gathering, starting a second gather or reduction while one is in flight) are agreed across
/// ranks before any communication, so every rank throws together.
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
  /// Flat buffer size: NumElements() rounded up to a multiple of the world size times
  /// FSDPConfig::ShardAlignment (sharded strategies).
  std::size_t PaddedSize() const noexcept;
  /// Elements this rank owns (PaddedSize() / world size; the whole buffer under NoShard).
  std::size_t ShardSize() const noexcept;
  /// First flat element this rank owns.
  std::size_t ShardOffset() const noexcept;

  /// This rank's master shard (what the optimizer updates in place), on the parameters' device:
  /// FP32, or BF16 when MasterDType() is BFloat16.
  TensorPtr LocalShard() const noexcept;
  /// The dtype of LocalShard(): the unit's own UnitPrecision::MasterDType, else the FSDP's
  /// FSDPConfig::MasterDType.
  DataType MasterDType() const noexcept;

  /// The unit's own precision policy as registered (unset fields follow the FSDP).
  const UnitPrecision& Precision() const noexcept;
  /// The dtype the next Gather() produces: the unit's own ParamDType, else the FSDP's current one.
  DataType ParamDType() const noexcept;
  /// The dtype ReduceGradients() reduces in: the unit's own ReduceDType, else the FSDP's.
  DataType ReduceDType() const noexcept;
  /// What ReduceGradients() sends: the unit's own Wire, else the FSDP's.
  GradientWire Wire() const noexcept;
  /// Whether micro-batches without sync are reduced at once into the FP32 gradient shard: the
  /// unit's own ShardedAccumulation, else the FSDP's (FSDPConfig::ShardedAccumulation).
  bool ShardedAccumulation() const noexcept;

  /// All-gathers the unit in the parameter dtype (collective). InvalidOperationError on every
  /// rank when any rank already has it gathered; ArgumentError("ParamDType") on every rank when the
  /// ranks' parameter dtypes differ (FSDP::SetParamDType() called on some ranks only).
  void Gather();
  /// Starts Gather() without waiting for its all-gather (collective; PyTorch FSDP2's
  /// `unshard(async_op=True)`, DeepSpeed's parameter prefetch): the shard is cast into the
  /// gathered buffer and the all-gather is started; WaitGather() completes it. Meanwhile the
  /// unit is not gathered (Parameters() throws) and the framework computes something else, for
  /// example the previous unit's forward. InvalidOperationError on every rank when any rank has
  /// the unit gathered or a gather of it in flight, ArgumentError("ParamDType") as Gather();
  /// nothing is started then. The gathered
  /// buffer counts against memory from here on (FSDP::SetPrefetch() documents the peak).
  void GatherAsync();
  /// True between GatherAsync() and WaitGather().
  bool IsGatherInFlight() const noexcept;
  /// Completes the gather started by GatherAsync(); the unit is then gathered exactly as after
  /// Gather(). Local (no new communication; the peers need not wait at the same moment).
  /// InvalidOperationError when no gather is in flight (for example a second WaitGather()). A
  /// failed all-gather throws CommunicationError; on a multi-rank group it ends the job
  /// (AbortGuard), since the peers' gathers may never complete.
  void WaitGather();
  /// Drops the gathered buffer and returns its memory to the FSDP's buffer cache (unless a view
  /// of it is still held elsewhere). InvalidOperationError when not gathered, including while a
  /// gather is in flight (WaitGather() first; local, no communication).
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
  ///
  /// With an FP8 parameter dtype (Float8E4M3FN or Float8E5M2) the views hold FP8 values
  /// `x * scale` of the masters x, one tensorwise scale per parameter (see
  /// Float8ScaleInverses() to decode them).
  const GradientMap& Parameters() const;
  /// The inverse scale of each parameter of an FP8 gather, by parameter name: one-element FP32
  /// tensors on the parameters' device (never read back to the host here), valid for the FP8
  /// values Parameters() holds now. Decode a parameter into FP32, FP16 or BF16 with
  /// DequantizeFloat8() (core/Float8Cast.hpp):
  /// @code
  /// const TensorPtr w8 = unit.Parameters().at("weight");
  /// const TensorPtr w = mlframework::Zeros(w8->GetShape(), DataType::Float32, w8->GetDevice());
  /// mlframework::DequantizeFloat8({&w8, 1}, {&w, 1}, unit.Float8ScaleInverses().at("weight"));
  /// @endcode
  /// How the scales are chosen (torchao's float8 all-gather under FSDP2, tensorwise current
  /// scaling): each rank takes the amax of each parameter's part of its FP32 master shard, one
  /// AllReduce(ReduceOp::Max) over ShardGroup() agrees the unit's amax vector (replicas under
  /// HybridShard hold the same masters; NoShard needs none), and `scale = fp8_max / amax` in
  /// FP32 (fp8_max: 448 for E4M3FN, 57344 for E5M2); an amax of 0 or not finite gives scale 1.
  /// Every rank computes the same scales from the same amax, so no scale is sent. The shard is
  /// quantized with a saturating scaled cast (ScaledCastToFloat8()) at the first gather after
  /// registration, an FSDP::Step(), a state load or a change of the parameter dtype, and kept
  /// (one byte a shard element): the other gathers of a step send those bytes as they are, half
  /// of BF16's traffic. InvalidOperationError when the unit's parameter dtype is not FP8 or it
  /// has not been gathered in that dtype yet.
  const GradientMap& Float8ScaleInverses() const;

  /// Reduce-scatters the full gradients of this unit's parameters (collective): every name of
  /// ParameterNames() with a tensor of its shape, any dtype. The result, averaged over ranks,
  /// is added to LocalGradient(). FP32 reductions are averaged after the sum (on the shard),
  /// FP16/BF16 ones before it (away from overflow). InvalidOperationError on every rank when any rank has not
  /// gathered the unit; ArgumentError on every rank for missing names or wrong shapes.
  /// Without gradient sync (FSDP::SetRequiresGradientSync(false)) it communicates nothing: the
  /// gradients are added in FP32 to a local full-unit sum (the same checks, raised on this rank
  /// only), which the next call with sync adds its gradients to and reduce-scatters once.
  void ReduceGradients(const GradientMap& gradients);
  /// Starts ReduceGradients() without waiting for its collective (collective): the gradients
  /// are flattened (and cast) into the reduce buffer and the reduce-scatter (all-reduce under
  /// NoShard) is started; WaitReduce() completes it and adds the result to LocalGradient(). The
  /// unit may be released meanwhile (the reduction does not read the gathered buffer), but the
  /// tensors of @p gradients must stay unchanged until WaitReduce(): an FP32 unit of one
  /// parameter is reduced straight from the framework's tensor. The checks and errors of
  /// ReduceGradients(), plus InvalidOperationError on every rank when any rank has a reduction
  /// of this unit in flight. Without gradient sync it sums locally as ReduceGradients() does
  /// and WaitReduce() has nothing to wait for. Results are bit-identical to ReduceGradients().
  /// With the FP8 wire the reduction completes within this call (its encode, exchange and sum
  /// are not overlapped) and WaitReduce() runs only HybridShard's replica all-reduce.
  void ReduceGradientsAsync(const GradientMap& gradients);
  /// True between ReduceGradientsAsync() and WaitReduce().
  bool IsReduceInFlight() const noexcept;
  /// Completes the reduction started by ReduceGradientsAsync() (local, except under
  /// HybridShard: the all-reduce across the replicate group follows the shard group's
  /// reduce-scatter, so it runs here, a blocking collective over the replicate group that every
  /// rank reaches in the same order of waits). InvalidOperationError when none is in flight;
  /// CommunicationError as WaitGather().
  void WaitReduce();
  /// This rank's gradient shard (ShardSize() elements, FP32), or null before ReduceGradients().
  TensorPtr LocalGradient() const noexcept;
  /// True while the unit holds gradients summed without gradient sync
  /// (FSDP::SetRequiresGradientSync(false)) that no ReduceGradients() with sync has reduced yet;
  /// never under ShardedAccumulation(), which reduces every micro-batch into the shard.
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
  // For FSDP's loads: replaces the master shard with @p values (ShardSize() of them; rounded to
  // nearest even into a BF16 shard).
  void LoadShard(std::span<const float> values);
  // For FSDP's step and loads: the masters changed, so the gathered buffer kept between steps
  // and the FP8 shard are stale.
  void Invalidate() noexcept;
  // For FSDP::FullParameters(): copies of the unit's full FP32 parameters (collective over
  // the shard group when sharded), by "unit.parameter".
  void AppendFullParameters(GradientMap& result) const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlframework::distributed::fsdp
