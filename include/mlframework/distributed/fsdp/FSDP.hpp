#pragma once
/// @file FSDP.hpp
/// @brief Fully sharded data parallel: sharded FP32 master weights, gathered per unit.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <mlframework/amp/IOptimizer.hpp>
#include <mlframework/core/DataType.hpp>
#include <mlframework/core/ITensor.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDPConfig.hpp>
#include <mlframework/distributed/fsdp/FSDPShardingUnit.hpp>
#include <mlframework/distributed/fsdp/PrefetchPolicy.hpp>
#include <mlframework/distributed/fsdp/ShardedCheckpoint.hpp>
#include <mlframework/export.hpp>

namespace mlframework::fp8 {
class IScalingRecipe;
}  // namespace mlframework::fp8

namespace mlframework::distributed::fsdp {

/// Fully sharded data parallel over a process group (PyTorch FSDP / DeepSpeed ZeRO-3).
///
/// The framework registers its parameters as units (for example one per layer); each unit keeps
/// only this rank's FP32 shard. Per step: Gather() each unit before its forward, use its
/// views, ReduceGradients() after its backward, Release() it; then clip and Step() with a
/// reference optimizer built over ShardedParameters() (it updates the shards in place).
///
/// @code
/// auto group = mlframework::distributed::MakeMpiProcessGroup();
/// FSDP fsdp(group, {.Strategy = ShardingStrategy::FullShard, .ParamDType = DataType::Float16});
/// fsdp.RegisterUnit("layer1", {{"weight", w1}, {"bias", b1}});
/// optimizers::Adam adam(fsdp.ShardedParameters());
/// // per step: unit.Gather(); forward/backward with unit.Parameters(); unit.ReduceGradients(g);
/// //           unit.Release(); fsdp.ClipGradNorm(1.0f); fsdp.Step(adam);
/// @endcode
///
/// **Hooks and overlap.** A framework drives FSDP from its module hooks instead of calling the
/// units itself; with SetPrefetch() the hooks overlap communication with compute. Unit indices
/// are registration order, which must be the forward order (backward runs in reverse):
///
/// - pre-forward of unit i, PreForward(i): waits for (or runs) unit i's gather; with Forward it
///   first starts unit i+1's.
/// - post-forward of unit i, PostForward(i): releases unit i (its memory goes to the cache);
///   with Backward the last unit stays gathered, since its backward comes next.
/// - pre-backward of unit i, PreBackward(i): waits for (or runs) unit i's gather; with Backward
///   it first starts unit i-1's.
/// - post-backward of unit i, PostBackward(i, gradients): with Backward waits for the reduction
///   in flight and starts unit i's, else reduces now; then releases unit i.
/// - after the last backward, FinishBackward(): waits for the last reduction.
///
/// Then ClipGradNorm() and Step() as usual (they refuse, on every rank, while a reduction is in
/// flight). So during unit i's forward the gather of unit i+1 is in flight, and during unit
/// i's backward the gather of unit i-1 and the reduction of unit i+1's gradients are. Peak
/// memory with prefetch on: the ZeRO-3 figure (16 B x parameters / ranks plus the largest
/// gathered unit) plus one more gathered unit, plus, in backward, one unit's reduction buffers
/// in flight (its flat gradient in the reduce dtype; on MPI's all-to-all reductions also the
/// received copy of the same size) while the framework computes the next unit's gradients.
/// Without prefetch, the hooks gather and reduce one unit at a time. Gradient accumulation
/// works unchanged: with SetRequiresGradientSync(false) PostBackward() sums locally.
/// @code
/// fsdp.SetPrefetch({.Forward = true, .Backward = true});
/// for (std::size_t i = 0; i < n; ++i) { fsdp.PreForward(i); forward(i, fsdp.Unit(i).Parameters());
/// fsdp.PostForward(i); } for (std::size_t i = n; i-- > 0;) {
///   fsdp.PreBackward(i);
///   GradientMap g = backward(i, fsdp.Unit(i).Parameters());
///   fsdp.PostBackward(i, g);
/// }
/// fsdp.FinishBackward();
/// fsdp.ClipGradNorm(1.0f);
/// fsdp.Step(adam);
/// @endcode
/// The hooks are collectives like the unit calls they make: every rank calls the same hooks
/// in the same order. The waits are local; on MPI a progress thread moves the data meanwhile
/// (MpiProcessGroup), on NCCL the GPU does.
///
/// Every method that communicates is a collective: all ranks call it in the same order.
/// Checks whose outcome could differ between ranks are agreed with an all-reduce first, so a
/// failing check throws on every rank and no rank is left waiting.
///
/// Hybrid sharding (ShardingStrategy::HybridShard, PyTorch's HSDP): units are sharded over
/// ShardGroup() (FSDPConfig::ShardGroupSize consecutive ranks, a node) and replicated across
/// ReplicateGroup(); Gather() all-gathers inside the shard group, ReduceGradients()
/// reduce-scatters inside it and all-reduces the shard across the replicas. The ranks of a
/// replicate group hold equal shards, so GradNorm() counts each shard once, and agreement
/// checks and the overflow flag still span every rank of ProcessGroup().
/// @code
/// // 4 ranks on 2 nodes: shard over the 2 ranks of a node, replicate across the nodes.
/// FSDP fsdp(world, {.Strategy = ShardingStrategy::HybridShard, .ShardGroupSize = 2});
/// @endcode
class MLFRAMEWORK_EXPORT FSDP {
 public:
  /// FSDP over @p group (ArgumentNullError when null) with @p config (validated; ArgumentError).
  /// Local for every strategy but HybridShard. Under HybridShard a collective over @p group:
  /// the config's checks, FSDPConfig::ShardGroupSize dividing the world size and every rank using
  /// the same ShardGroupSize are agreed (ArgumentError on every rank together), then @p group is
  /// split (IProcessGroup::Split) into the shard and replicate groups; a group that cannot split
  /// throws InvalidOperationError on every rank.
  explicit FSDP(std::shared_ptr<IProcessGroup> group, FSDPConfig config = {});
  ~FSDP();
  /// Not copyable: owns the units.
  FSDP(const FSDP&) = delete;
  /// Not assignable.
  FSDP& operator=(const FSDP&) = delete;

  /// Registers a unit (collective): flattens @p parameters (name to full FP32/FP16/BF16 tensor,
  /// identical on every rank unless SyncModuleStates), pads to a multiple of the world size
  /// (HybridShard: of the shard group size) and keeps this rank's FP32 shard. The unit's buffers live on the
  /// parameters' device: CPU tensors for CPU parameters, otherwise tensors of the parameters' backend
  /// (TensorBackend::Allocate and View); parameters without a backend, or whose backend cannot
  /// allocate and view, keep CPU buffers (staged through host copies). ArgumentError on every
  /// rank for: an empty map, a duplicate unit name, a null or empty (size 0) parameter,
  /// parameters on two devices (or on another device than the units registered before; the
  /// message names the parameter and both devices), a unit smaller than the world size
  /// (sharded strategies; HybridShard: the shard group size), ranks that disagree on the world size, the unit's name,
  /// its parameter names or shapes, or its precision; an invalid @p precision (named by field);
  /// ranks whose FSDPConfig differs in Strategy, ShardAlignment, SyncModuleStates, ParamDType,
  /// ReduceDType or Wire (naming `config`, with this rank's values).
  /// @p precision gives the unit its own gather and reduce dtypes (UnitPrecision: norm layers
  /// in FP32 while the rest runs in BF16); by default it follows the FSDP's. The padding also
  /// makes each shard a multiple of FSDPConfig::ShardAlignment, and the shard is BF16 under
  /// FSDPConfig::MasterDType / UnitPrecision::MasterDType.
  FSDPShardingUnit& RegisterUnit(const std::string& name, const GradientMap& parameters,
                                 const UnitPrecision& precision = {});
  /// Number of registered units.
  std::size_t UnitCount() const noexcept;
  /// Unit number @p index in registration order; ArgumentError when out of range.
  FSDPShardingUnit& Unit(std::size_t index);
  /// Unit named @p name; ArgumentError when unknown.
  FSDPShardingUnit& Unit(const std::string& name);

  /// The process group (every rank: agreement checks, the overflow flag, averaging).
  IProcessGroup& ProcessGroup() const noexcept;
  /// The ranks units are sharded over and gathered in: ProcessGroup() itself, except under
  /// HybridShard, where it is this rank's shard group of FSDPConfig::ShardGroupSize ranks
  /// (ranks `rank / S * S` to `rank / S * S + S - 1` of ProcessGroup()).
  IProcessGroup& ShardGroup() const noexcept;
  /// HybridShard: the ranks that hold the same shards as this one (one per shard group, those
  /// with equal `rank % S`), across which gradient shards are all-reduced; null otherwise.
  IProcessGroup* ReplicateGroup() const noexcept;
  /// The configuration.
  const FSDPConfig& Config() const noexcept;
  /// Changes the dtype later Gather() calls produce (FSDPAmpIntegration sets the forward dtype),
  /// except for units registered with their own UnitPrecision::ParamDType, which keep it. An FP8
  /// dtype gathers FP8 shards with per-parameter scales (FSDPShardingUnit::Float8ScaleInverses()).
  /// ArgumentError for an invalid dtype; InvalidOperationError while any unit is gathered. Call it
  /// on every rank with the same dtype: the next gather refuses (on every rank) while they differ.
  void SetParamDType(DataType dtype);
  /// Agrees @p recipe's recorded amaxes over ProcessGroup() (collective): every registered
  /// tensor's amax becomes its maximum over all ranks, in one all-reduce on the amaxes' device,
  /// so the next IScalingRecipe::UpdateScales() gives every rank the same scales (Transformer
  /// Engine's amax reduction over the data-parallel group). Call it after the step's casts,
  /// before UpdateScales(). distributed::AllReduceAmax() (Float8Amax.hpp) with every name; its
  /// errors, on every rank with nothing changed. Under fp8::CurrentScaling, whose scales follow
  /// each rank's own casts, it changes the recorded amaxes only.
  void AgreeAmax(fp8::IScalingRecipe& recipe);

  /// Gradient accumulation without communication (PyTorch FSDP2's set_requires_gradient_sync,
  /// DeepSpeed's gradient_accumulation_steps): while off, ReduceGradients() only sums each
  /// unit's full gradients locally in FP32; turn it back on for the last micro-batch, whose
  /// ReduceGradients() reduce-scatters the sum once. Loss scaling and the overflow check then
  /// see the accumulated gradients once, after that reduction. The cost is one FP32 full-unit
  /// buffer per unit with unsynced gradients (from the buffer cache). Local: no communication;
  /// every rank must switch at the same micro-batch. On by default. Units with sharded
  /// accumulation (FSDPConfig::ShardedAccumulation) reduce every micro-batch instead and add it
  /// into their FP32 gradient shard: no full-unit buffer, one reduction per micro-batch.
  /// @code
  /// for (int micro = 0; micro < k; ++micro) {
  ///   fsdp.SetRequiresGradientSync(micro == k - 1);
  ///   // Gather, forward, backward, ReduceGradients, Release for every unit
  /// }
  /// fsdp.Step(adam);
  /// @endcode
  void SetRequiresGradientSync(bool requires_sync) noexcept;
  /// Whether ReduceGradients() communicates (SetRequiresGradientSync()).
  bool RequiresGradientSync() const noexcept;

  /// Which collectives the hooks below start ahead (see the class comment); local, every rank
  /// the same. Takes effect at the next hook; collectives already in flight stay in flight.
  void SetPrefetch(PrefetchPolicy policy) noexcept;
  /// The current prefetch policy (both off by default).
  const PrefetchPolicy& Prefetch() const noexcept;
  /// Pre-forward hook of unit @p unit (collective): on return the unit is gathered (its gather
  /// in flight is waited for, else it is gathered now); with PrefetchPolicy::Forward the
  /// gather of unit @p unit + 1 is started unless it is gathered or in flight already, before
  /// the wait (its start then overlaps this unit's all-gather; this unit's own gather, when
  /// none is in flight, is started first, so at most these two units are gathered).
  /// ArgumentError for an index out of range; the units' errors otherwise.
  void PreForward(std::size_t unit);
  /// Post-forward hook (local): releases unit @p unit when it is gathered, except the last
  /// unit under PrefetchPolicy::Backward: its backward comes next, so it stays gathered for
  /// PreBackward() instead of being gathered again (PyTorch FSDP2 keeps its root unsharded
  /// after forward for the same reason). A forward without a backward (evaluation) leaves it
  /// gathered until the next PreForward() of another unit releases it, or Unit(n - 1).Release();
  /// Step() and the checkpoints refuse while it is gathered, as for any gathered unit.
  void PostForward(std::size_t unit);
  /// Pre-backward hook of unit @p unit (collective): as PreForward(), prefetching unit
  /// @p unit - 1 under PrefetchPolicy::Backward.
  void PreBackward(std::size_t unit);
  /// Post-backward hook of unit @p unit (collective): with PrefetchPolicy::Backward it starts
  /// ReduceGradientsAsync(@p gradients), first waiting for the oldest reduction in flight when
  /// two are (so at most two run: the previous unit's and this one's, which lets a reduction
  /// that runs long finish during the next unit's backward instead of stalling this hook).
  /// The tensors of @p gradients must then stay unchanged until the PostBackward() two units
  /// later or FinishBackward(). Without Backward: ReduceGradients(@p gradients). Then it
  /// releases the unit.
  void PostBackward(std::size_t unit, const GradientMap& gradients);
  /// After the last PostBackward() (local): waits for every reduction still in flight, in the
  /// order they started, so the
  /// gradient shards are complete for ClipGradNorm() and Step().
  void FinishBackward();

  /// Bytes of idle gather and gradient buffers cached for reuse. Release() and the flat
  /// gradient buffers of ReduceGradients() hand their memory back to this cache, so the next
  /// unit's Gather() allocates nothing (PyTorch's caching allocator, DeepSpeed's reused flat
  /// buffers); buffers a caller still references past Release() are never reused.
  std::size_t CachedBufferBytes() const noexcept;
  /// Bytes of the cache's buffers in use now: gathered units, flat gradient buffers and scratch
  /// of reductions in flight, and the unsharded accumulators of micro-batches without gradient
  /// sync (PaddedSize() floats per unit, none under FSDPConfig::ShardedAccumulation).
  std::size_t BufferBytesInUse() const noexcept;
  /// The most idle bytes the cache keeps: one use of the largest unit (its gathered buffer in
  /// the parameter dtype, its flat gradient buffer in the reduce dtype and shard-sized scratch),
  /// so the ZeRO-3 figure "16 B x parameters / ranks + the largest gathered unit" holds.
  std::size_t CachedBufferLimit() const noexcept;
  /// Frees the cached idle buffers now (for example before evaluation or a checkpoint); the
  /// next Gather() allocates again.
  void ReleaseCachedBuffers() noexcept;

  /// Unit name to its local master shard (FP32, or BF16 under FSDPConfig::MasterDType): build
  /// the optimizer over this map. With BF16 shards give the optimizer BF16 masters:
  /// @code
  /// FSDP fsdp(group, {.ParamDType = DataType::BFloat16, .MasterDType = DataType::BFloat16});
  /// // ... RegisterUnit() ...
  /// optimizers::AdamOptions options;
  /// options.Masters = MasterFormat::BFloat16StochasticRounding;  // or BFloat16Remainder: exact
  /// options.FirstMomentFormat = StateFormat::Int8Block;
  /// options.SecondMomentFormat = StateFormat::UInt8Block;
  /// optimizers::Adam adam(fsdp.ShardedParameters(), options);  // 2 + 2 bytes per parameter
  /// @endcode
  GradientMap ShardedParameters() const;
  /// Unit name to its LocalGradient(). InvalidOperationError when a unit has none.
  GradientMap LocalGradients() const;
  /// Global L2 norm of the gradients (collective): the square root of the all-reduced sum of
  /// the squares of every rank's shards, the same value on every rank. Under HybridShard the
  /// squares are summed over the shard group (each shard counted once, not once per replica)
  /// and the replicas agree on one value (MAX, exact).
  /// InvalidOperationError on every rank while any rank has a gradient reduction in flight
  /// (FinishBackward() first) or holds gradients accumulated without sync (HasUnsyncedGradients():
  /// the norm would leave their sum out; reduce the last micro-batch with sync first).
  double GradNorm();
  /// Scales the gradient shards by `max_norm / (norm + 1e-6)` when the global norm exceeds
  /// @p max_norm (PyTorch's clip_grad_norm_), identically on every rank; returns the norm
  /// before clipping (collective). ArgumentError naming `max_norm` on every rank, with nothing
  /// changed, unless @p max_norm is finite and > 0 on every rank and the same on every rank;
  /// GradNorm()'s InvalidOperationError likewise.
  double ClipGradNorm(float max_norm);
  /// Hands LocalGradients() to @p optimizer (built over ShardedParameters()), steps it and drops
  /// the gradients; the next Gather() sees the new weights. Before the update it hands the
  /// optimizer each unit's ShardOffset() (amp::IOptimizerState::SetElementOffsets()), so
  /// stochastically rounded BF16 masters draw the bits of the same elements at every world size
  /// and a resharded run continues bit for bit. InvalidOperationError on every rank
  /// when any rank misses a gradient, holds unsynced gradients (HasUnsyncedGradients()), has a
  /// gradient reduction in flight or still has a unit gathered (or being gathered).
  /// ArgumentError naming `optimizer` on every rank when its
  /// amp::IOptimizerState::StateMasterFormat() does not fit a unit's MasterDType(): BF16 masters
  /// over an FP32 shard, or FP32 masters (copies the FSDP never sees) over a BF16 one; or when
  /// its IOptimizerState::Parameters() are not the units' shards one to one (name and shape).
  /// These are checked before the optimizer is touched, so nothing changes on any rank. The
  /// optimizer's own SetGradients() errors are agreed the same way; a rank whose optimizer took
  /// the gradients while another rank's refused hands it back those it held before
  /// (IOptimizer::GetGradients()). The element offsets are set only once every rank's optimizer
  /// took its gradients. An exception from SetElementOffsets() or the update itself on a
  /// multi-rank group ends the job (AbortGuard), since the ranks' weights would diverge.
  /// Over shards on a GPU the reference optimizers (SGD, Adam) keep FP32 masters and state on
  /// the host (ZeRO-Offload style): the step copies each gradient shard to the host and the
  /// updated shard back, the one host round trip of a training step (docs/cuda-backend.md).
  void Step(amp::IOptimizer& optimizer);
  /// Drops every unit's gradient shard (for example after a skipped step).
  void ZeroGrad() noexcept;

  /// The full parameters as FP32 tensors named "unit.parameter" (collective; for checkpoints,
  /// evaluation and tests; does not change the units' state).
  GradientMap FullParameters();

  /// This rank's shards as a versioned, checksummed blob (world size, rank, strategy, units).
  /// Under HybridShard the ranks of a replicate group hold, and save, equal shards (the blob
  /// differs only in the rank); the shard size per unit records the shard group size. The
  /// values are FP32: a BF16 master shard (FSDPConfig::MasterDType) widened exactly; its
  /// optimizer's remainders are the optimizer's state (SaveShardedCheckpoint() keeps both).
  std::vector<std::byte> StateDict() const;
  /// Restores a blob from StateDict() of the same rank and world size (collective).
  /// ArgumentError on every rank when any rank's blob is corrupted or does not match
  /// (world size, rank, units, sizes; a HybridShard blob of another shard group size has other
  /// shard sizes); InvalidOperationError on every rank while a unit is gathered or being
  /// gathered, has a gradient reduction in flight or holds unsynced gradients (as
  /// LoadShardedCheckpoint()); nothing changes then. Gradient shards are kept. Into a BF16 master
  /// shard the values are rounded to nearest even (exact for a blob of BF16 shards).
  void LoadStateDict(std::span<const std::byte> state);

  /// This rank's part of a resharding checkpoint (PyTorch DCP, DeepSpeed's Universal
  /// Checkpoint): a versioned, checksummed blob with the full layout of every unit (names,
  /// parameter names, shapes and offsets, dtypes, padded size), the saved world size and rank,
  /// this rank's range of each unit, its master shard (FP32 values; or a BF16 shard's values and,
  /// under MasterFormat::BFloat16Remainder, the optimizer's 16-bit remainders, with the shard
  /// dtype and master format recorded), the optimizer's per-element state
  /// over the same range with its kind, options and step count, the scaler's state and
  /// @p contents.Step. Local (no communication); every rank saves its own blob. A load at any
  /// world size takes the blobs of all saved ranks. Only the FP32 values are in the machine's
  /// byte order (little-endian on every platform the library builds for).
  std::vector<std::byte> SaveShardedCheckpoint(const ShardedCheckpointContents& contents = {}) const;
  /// Restores a checkpoint saved at any world size from @p saved_ranks, the blobs of every
  /// saved rank in any order (collective): each rank takes its own ranges of the shards and
  /// the optimizer state; the scaler state and the optimizer's step count and learning rate
  /// are loaded as saved. Returns the saved training step. ArgumentError on every rank, naming
  /// what differs, for a corrupt, truncated or foreign blob, a wrong format version, masters
  /// stored in another format than the units keep them (their MasterDType() and the optimizer's
  /// masters; loaded when ShardedCheckpointContents::Conversion converts them, naming
  /// `contents.Conversion` otherwise, and a master that BF16 cannot hold naming `saved_ranks`), a missing
  /// or duplicate rank, blobs of different checkpoints, ranks handed different blobs (their
  /// checksums are compared across ranks), another model (unit or parameter
  /// names, shapes, offsets), another optimizer kind or options, or a scaler state its Load
  /// rejects; InvalidOperationError on every rank while a unit is gathered or being gathered,
  /// has a gradient reduction in flight or holds unsynced gradients. Nothing changes on any rank
  /// then (a scaler state loaded on some ranks is put back). Gradient shards are dropped
  /// (ZeroGrad()).
  std::int64_t LoadShardedCheckpoint(std::span<const std::vector<std::byte>> saved_ranks,
                                     const ShardedCheckpointContents& contents = {});
  /// SaveShardedCheckpoint() into @p directory (collective): every rank writes its blob to
  /// ShardedCheckpointFileName(rank) (atomically, through a temporary file) and rank 0 removes
  /// shard files of higher ranks left by an earlier save at a larger world size. ArgumentError
  /// on every rank when any rank cannot write.
  void SaveShardedCheckpointFiles(const std::filesystem::path& directory,
                                  const ShardedCheckpointContents& contents = {});
  /// LoadShardedCheckpoint() from the files of @p directory (ReadShardedCheckpointDirectory();
  /// every rank reads every file), with the same agreement: a file missing or unreadable on
  /// any rank is an ArgumentError on every rank. Returns the saved training step.
  std::int64_t LoadShardedCheckpointFiles(const std::filesystem::path& directory,
                                          const ShardedCheckpointContents& contents = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PrefetchPolicy prefetch_{};
  // The last unit, left gathered by PostForward() for the PreBackward() that follows (Backward
  // prefetch); the size of the unit list when none is.
  std::size_t kept_after_forward_ = static_cast<std::size_t>(-1);
};

}  // namespace mlframework::distributed::fsdp
