#pragma once
/// @file MpiProcessGroup.hpp
/// @brief Process group over MPI (Open MPI): the engine for CPU clusters.
///
/// This header has no MPI types, so it is the same in every build; in a build without
/// MPI (`MLFW_HAS_MPI == 0` in mlframework/config.hpp) the constructors throw BackendError.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed {

/// How FP16/BF16 sums are computed (MPI has no standard 16-bit float type).
enum class HalfReduction {
  /// Reduce 16-bit words with a user-defined MPI_Op that widens each pair to FP32, adds and
  /// rounds back after every pairwise step (half the traffic of ConvertToFloat32).
  UserOp,
  /// Widen the tensor to FP32 with the fused cast kernel, reduce with MPI_FLOAT, narrow back
  /// (one rounding at the end, twice the bytes on the wire).
  ConvertToFloat32,
  /// Exchange the 16-bit words with MPI_Alltoall(v) so that each rank holds every rank's copy
  /// of its own part, combine them locally with the vectorized widening kernels (FP32
  /// accumulation in rank order, one rounding) and, for AllReduce, all-gather the parts: the
  /// wire traffic of a ring reduce-scatter, without a per-element call into a user op, and
  /// identical results on every rank. Exchanges in steps of at most 1 MiB per rank through one
  /// reused scratch buffer per group. The default: it measured fastest (docs/BENCHMARKS.md,
  /// "FSDP collectives"). Tensors of more than INT_MAX elements in all fall back to UserOp.
  AllToAll,
};

/// How FP32 sums (and maxima) are computed.
enum class Float32Reduction {
  /// MPI's own MPI_Reduce_scatter_block / MPI_Allreduce with MPI_FLOAT.
  Builtin,
  /// MPI_Alltoall(v) so that each rank holds every rank's copy of its own part, a local
  /// vectorized sum in rank order and, for AllReduce, an MPI_Allgatherv of the parts: the wire
  /// traffic of a ring reduce-scatter, in steps of at most 1 MiB per rank through one reused
  /// scratch buffer per group. The default: it measured faster (docs/BENCHMARKS.md, "FSDP
  /// collectives"). Tensors of more than INT_MAX elements in all fall back to Builtin.
  AllToAll,
};

/// How a rank waits for the other ranks of an MPI collective.
///
/// Open MPI's blocking calls poll until they complete, so a rank waiting for a slower peer keeps
/// its core busy. On a machine where other work shares the cores, the scheduler can then never
/// move that work onto the waiting rank's core, and the rank that shares its core runs at a
/// fraction of its speed while its peer spins. The sleeping modes give the core back while a
/// rank waits for the others to arrive at a collective: each blocking collective first tests a
/// non-blocking barrier, sleeping between tests (growing, capped sleeps; the process-wide MPI
/// lock is not held while sleeping), and then moves the data in MPI's blocking call, which
/// every rank has entered by then. Data is never moved by a sleeping rank, because without
/// single-copy Open MPI moves large messages only inside MPI calls on both sides. Results are
/// the same bits in every mode. For the same reason the progress thread of the *Async
/// collectives yields between its tests in every mode: its tests move their data.
/// docs/fsdp-overlap.md ("Waiting on a shared machine") has the measurements and the settings
/// to use.
enum class WaitMode {
  /// MPI's blocking calls as they are, and a progress thread that yields between tests: the
  /// lowest latency when the ranks have their cores to themselves.
  Spin,
  /// Sleep from the first test on while waiting for the other ranks to arrive.
  Sleep,
  /// Test back to back for a short, bounded time (most arrivals on a quiet machine), then sleep
  /// as Sleep does.
  Hybrid,
};

/// Options of MpiProcessGroup.
struct MpiProcessGroupOptions {
  /// Fortran handle of the communicator to use (`MPI_Comm_c2f(comm)`); empty: MPI_COMM_WORLD.
  /// The group duplicates it, so its traffic never mixes with the application's.
  std::optional<std::int64_t> Communicator{};
  /// How FP16/BF16 sums are reduced.
  HalfReduction HalfSum = HalfReduction::AllToAll;
  /// How FP32 sums are reduced.
  Float32Reduction Float32Sum = Float32Reduction::AllToAll;
  /// Seconds a rank waits at exit for every rank to reach MPI_Finalize (finite, > 0) before it
  /// aborts the job; applies when the library initialized MPI. Empty: the environment variable
  /// MLFW_MPI_FINALIZE_TIMEOUT_S, else kDefaultFinalizeTimeoutSeconds. With several groups the
  /// largest value requested wins.
  std::optional<double> FinalizeTimeoutSeconds{};
  /// Share the node's cores among the ranks on it, as torchrun does: when the environment does
  /// not set OMP_NUM_THREADS and several ranks of the communicator share this node, the first
  /// group created in the process lowers the OpenMP thread count of the calling thread (what
  /// the CPU kernels use) to max(1, cores / ranks on this node). Without it, four ranks on two
  /// cores would each run two kernel threads that wait for each other at every chunk barrier.
  bool ShareCoresAmongLocalRanks = true;
  /// How this group's ranks wait for each other. Empty: the environment variable MLFW_MPI_WAIT
  /// (`spin`, `sleep` or `hybrid`; unset or empty: Spin); another value is an ArgumentError
  /// naming the variable and the value. The group's Options() report the mode chosen, and
  /// Split() passes it on.
  std::optional<WaitMode> Wait{};
};

/// Default of MpiProcessGroupOptions::FinalizeTimeoutSeconds: long enough for a rank that saves a
/// checkpoint alone after the others finished, short enough that a stuck job ends in minutes.
inline constexpr double kDefaultFinalizeTimeoutSeconds = 300.0;

/// Collectives over an MPI communicator.
///
/// Initializes MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) when the application did not, and
/// then finalizes it at process exit; MPI initialized by the application is left to it.
///
/// Exit never hangs: MPI_Finalize waits for every rank, so a rank that returns from main while
/// another rank waits in a collective it will never complete (or the reverse: a rank that waits
/// in a collective after a peer returned) would hang the job forever. Before finalizing, each
/// rank therefore enters a non-blocking barrier and polls it for at most
/// MpiProcessGroupOptions::FinalizeTimeoutSeconds; when it does not complete, the rank prints
/// "mlframework: rank R of N: ..." naming what happened to stderr and calls MPI_Abort, which
/// also ends the ranks blocked in the collective. When every rank exits normally the barrier
/// completes at once. Every
/// MPI call is checked: the communicator uses MPI_ERRORS_RETURN and a failure throws
/// CommunicationError naming the call and MPI_Error_string. Abort() calls MPI_Abort.
/// Element counts per rank are limited to INT_MAX (ArgumentError beyond).
///
/// The *Async collectives start MPI's non-blocking collectives on the caller's thread (so every
/// rank starts them in its program order) and return a request. Open MPI advances them only
/// inside MPI calls, so the group runs a progress thread while any is outstanding: it tests
/// them (one MPI_Test at a time under the lock that serializes every MPI call of the library,
/// MPI_THREAD_SERIALIZED) and yields between tests, and runs their local combine when they
/// arrive. The environment variable
/// MLFW_MPI_PROGRESS_THREAD=0 turns it off (progress then happens in Test(), Wait() and the
/// blocking calls only). Tensors that need host staging take the blocking path and return a
/// completed request. Destroying the group completes every
/// outstanding request first.
class MLFRAMEWORK_EXPORT MpiProcessGroup final : public IProcessGroup {
 public:
  /// Joins the communicator of @p options; BackendError when built without MPI.
  explicit MpiProcessGroup(MpiProcessGroupOptions options = {});
  /// Frees the duplicated communicator.
  ~MpiProcessGroup() override;
  /// Not copyable (owns a communicator).
  MpiProcessGroup(const MpiProcessGroup&) = delete;
  /// Not assignable.
  MpiProcessGroup& operator=(const MpiProcessGroup&) = delete;

  int Rank() const noexcept override;
  int WorldSize() const noexcept override;
  /// "mpi".
  std::string_view BackendName() const noexcept override;
  void AllGather(const ITensor& input, ITensor& output) override;
  void ReduceScatter(const ITensor& input, ITensor& output, ReduceOp op = ReduceOp::Sum) override;
  void AllReduce(ITensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  /// MPI_Alltoall of the chunks' bytes.
  void AllToAll(const ITensor& input, ITensor& output) override;
  void Broadcast(ITensor& tensor, int root = 0) override;
  void Barrier() override;
  void AllReduceHost(std::span<double> values, ReduceOp op) override;
  using IProcessGroup::AllReduceHost;
  /// MPI_Comm_split of this group's communicator into a new MpiProcessGroup with the same
  /// options (collective over this group).
  std::shared_ptr<IProcessGroup> Split(int color, int key) override;
  /// MPI_Iallgather (in place when @p input is this rank's slot of @p output).
  CollectiveRequestPtr AllGatherAsync(const ITensor& input, ITensor& output) override;
  /// The all-to-all strategies exchange the whole input with one MPI_Ialltoall and combine
  /// on completion (same bits as ReduceScatter()); the others MPI_Ireduce_scatter_block.
  CollectiveRequestPtr ReduceScatterAsync(const ITensor& input, ITensor& output, ReduceOp op = ReduceOp::Sum) override;
  /// The all-to-all strategies: MPI_Ialltoallv, the combine, then MPI_Iallgatherv (same bits
  /// as AllReduce()); the others MPI_Iallreduce (16-bit sums with the user MPI_Op).
  CollectiveRequestPtr AllReduceAsync(ITensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  /// @p prepare and the MPI_Iallgather both run on the progress thread (or in the Test() or
  /// Wait() that first polls the request), the all-gather on a communicator of its own, in the
  /// order these calls were made.
  CollectiveRequestPtr AllGatherAsyncAfter(std::function<void()> prepare, const ITensor& input,
                                           ITensor& output) override;
  /// As ReduceScatterAsync(); @p finish runs on the progress thread right after the combine.
  /// The all-to-all strategies also start their MPI_Ialltoall there, on the communicator and
  /// in the order of AllGatherAsyncAfter().
  CollectiveRequestPtr ReduceScatterAsyncThen(const ITensor& input, ITensor& output, ReduceOp op,
                                              std::function<void()> finish) override;
  /// Prints the message and calls MPI_Abort on the communicator (never returns).
  void Abort(const std::string& message) noexcept override;

  /// The options this group was created with.
  const MpiProcessGroupOptions& Options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// True when this build has the MPI engine.
MLFRAMEWORK_EXPORT bool MpiAvailable() noexcept;
/// A shared MpiProcessGroup; BackendError when built without MPI.
MLFRAMEWORK_EXPORT std::shared_ptr<IProcessGroup> MakeMpiProcessGroup(MpiProcessGroupOptions options = {});

}  // namespace mlframework::distributed
