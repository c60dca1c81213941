#pragma once
/// @file IProcessGroup.hpp
/// @brief The seam for collectives: every distributed feature talks to ranks only through it.

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <mlframework/core/ITensor.hpp>
#include <mlframework/distributed/CollectiveRequest.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed {

/// Reduction applied by AllReduce and ReduceScatter.
enum class ReduceOp {
  Sum,  ///< Element-wise sum (FP16/BF16 are accumulated in FP32 per element, rounded once per combine).
  Max,  ///< Element-wise maximum (used to agree on flags: any rank's 1 wins).
};

/// Name of @p op ("Sum", "Max") for messages.
MLFRAMEWORK_EXPORT std::string_view ToString(ReduceOp op) noexcept;

/// A group of ranks that run collectives together (MPI communicator, NCCL communicator,
/// or the single-process group).
///
/// The collectives below are blocking (the *Async forms return a CollectiveRequest) and must be called by every rank of
/// the group in the same order with matching dtypes and sizes. One thread at a time issues a group's collectives, as
/// with an MPI communicator or an NCCL one: calls from two threads at once have no order the ranks could agree on.
/// Tensors of all three dtypes are accepted; FP16 and BF16 travel as 16-bit words. Tensors that live on another device
/// or come from a user backend are staged through host memory by implementations that cannot address them.
///
/// Argument errors (dtype or size mismatch) throw ArgumentError before any communication;
/// a failed collective throws CommunicationError naming the call and the backend's error string.
/// A rank that cannot continue must call Abort() (see AbortGuard) so the others do not wait forever.
class MLFRAMEWORK_EXPORT IProcessGroup {
 public:
  virtual ~IProcessGroup();

  /// This process's index in the group, in [0, WorldSize()).
  virtual int Rank() const noexcept = 0;
  /// Number of ranks in the group (>= 1).
  virtual int WorldSize() const noexcept = 0;
  /// Short name of the engine ("local", "mpi", "nccl").
  virtual std::string_view BackendName() const noexcept = 0;

  // The tensor collectives below take Float32, Float16 and BFloat16 tensors; the library's
  // engines throw ArgumentError naming `tensor` for an FP8 dtype, except in AllGather.

  /// Concatenates every rank's @p input into @p output in rank order.
  /// Same dtype; `output.Size() == input.Size() * WorldSize()`. AllGather only moves bytes, so
  /// the library's engines also take the FP8 dtypes here (one byte an element: FSDP's FP8
  /// parameter gathers); a user implementation may refuse them. @p input may be a view of
  /// exactly this rank's slot of @p output (an in-place all-gather, which FSDP uses);
  /// implementations must accept that aliasing.
  virtual void AllGather(const ITensor& input, ITensor& output) = 0;
  /// Reduces @p input element-wise over all ranks with @p op and leaves chunk `Rank()` of the
  /// result in @p output. Same dtype; `input.Size() == output.Size() * WorldSize()`.
  virtual void ReduceScatter(const ITensor& input, ITensor& output, ReduceOp op = ReduceOp::Sum) = 0;
  /// Reduces @p tensor element-wise over all ranks with @p op, in place on every rank.
  virtual void AllReduce(ITensor& tensor, ReduceOp op = ReduceOp::Sum) = 0;
  /// Exchanges chunks: @p input and @p output have the same dtype and size, a multiple of
  /// WorldSize(); chunk `p` of @p input goes to rank `p`, and chunk `p` of @p output is what
  /// rank `p` sent to this one (MPI_Alltoall; NCCL: grouped ncclSend/ncclRecv). Only bytes
  /// move, so every dtype is taken, FP8 included (FSDP's FP8 gradient wire, which sums the
  /// parts itself). @p input and @p output must not overlap. ArgumentError naming `output` for
  /// a dtype or size mismatch, `input` for a size that is not a multiple of the world size,
  /// before any communication. The default, for other implementations, throws
  /// InvalidOperationError on every rank.
  virtual void AllToAll(const ITensor& input, ITensor& output);
  /// Copies @p tensor of rank @p root to every rank (same dtype and size everywhere).
  virtual void Broadcast(ITensor& tensor, int root = 0) = 0;
  /// Returns once every rank has entered the barrier.
  virtual void Barrier() = 0;

  /// Reduces host doubles in place over all ranks (flags, norms, agreement checks).
  /// Doubles carry integers up to 2^53 exactly, so counts and hashes travel here too.
  virtual void AllReduceHost(std::span<double> values, ReduceOp op) = 0;

  /// Ends the whole job: prints "mlframework: rank R aborting: <message>" to stderr and
  /// aborts every rank of the communicator (MPI_Abort, ncclCommAbort + exit). The real
  /// engines never return; a test double may.
  virtual void Abort(const std::string& message) noexcept = 0;

  /// Splits this group into disjoint groups (collective over this group, MPI_Comm_split):
  /// ranks that pass the same @p color form one new group, ranked by @p key, ties by their
  /// rank here. FSDP's HybridShard builds its shard and replicate groups with it. The new
  /// group uses the same engine and options; its traffic never mixes with this group's.
  /// ArgumentError for a negative @p color (every rank must land in a group) before any
  /// communication. The library's engines split (NCCL through ncclCommSplit, NCCL 2.18 or
  /// later); the default, for other implementations, throws InvalidOperationError on every rank.
  virtual std::shared_ptr<IProcessGroup> Split(int color, int key);

  // Non-blocking forms (MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Iallreduce; NCCL on a
  // communication stream). Same arguments, checks and results as the blocking calls, and the
  // same rule: every rank starts them in the same order, interleaved with the blocking calls
  // in the same order. The returned request must be completed (CollectiveRequest::Wait() or a
  // Test() that returned true) before the tensors are read, written or freed. Argument errors
  // throw before any communication, as in the blocking calls. The default implementation runs
  // the blocking call and returns a completed request (LocalProcessGroup, user groups), so
  // code written against the asynchronous forms runs on every group.

  /// Starts AllGather(@p input, @p output); the outputs are final once the request completes.
  virtual CollectiveRequestPtr AllGatherAsync(const ITensor& input, ITensor& output);
  /// Starts ReduceScatter(@p input, @p output, @p op).
  virtual CollectiveRequestPtr ReduceScatterAsync(const ITensor& input, ITensor& output, ReduceOp op = ReduceOp::Sum);
  /// Starts AllReduce(@p tensor, @p op).
  virtual CollectiveRequestPtr AllReduceAsync(ITensor& tensor, ReduceOp op = ReduceOp::Sum);

  // Non-blocking forms with local work attached (FSDP's cast into a gather's send slot, its
  // averaging of a reduced gradient shard), so that an engine with a progress thread can run
  // that work there, during the caller's compute, instead of on the caller's thread. The work
  // may run on another thread: it must not call collectives and may touch only tensors that
  // the caller leaves alone until the request completes. An exception from it is thrown by the
  // call itself or by the request's Wait() or Test(). On the MPI engine a failure on one rank
  // leaves the others waiting, so callers end the job on failure (AbortGuard), as for any
  // failed collective. Every rank makes these calls in the same order among themselves and
  // with the other collectives, as usual; an engine may still start their communication
  // later, on a channel of their own, in the order of the calls (the MPI engine: on its
  // progress thread and a second communicator). Argument errors throw before any
  // communication.

  /// Starts AllGather(@p input, @p output) once @p prepare() has written @p input (the MPI
  /// engine runs @p prepare() and starts the all-gather on its progress thread). The default
  /// runs @p prepare() and then AllGatherAsync(@p input, @p output).
  virtual CollectiveRequestPtr AllGatherAsyncAfter(std::function<void()> prepare, const ITensor& input,
                                                   ITensor& output);
  /// Starts ReduceScatter(@p input, @p output, @p op) and runs @p finish() once @p output holds
  /// the result, before the request completes (the MPI engine: on its progress thread, right
  /// after its combine). The default runs ReduceScatterAsync() and @p finish() in the first
  /// Wait() or Test() that finds the collective complete, on the caller's thread; a request
  /// destroyed without either completes its collective without running @p finish().
  virtual CollectiveRequestPtr ReduceScatterAsyncThen(const ITensor& input, ITensor& output, ReduceOp op,
                                                      std::function<void()> finish);

  /// Convenience: AllReduce of one double.
  double AllReduceHost(double value, ReduceOp op);

 protected:
  /// Only implementations construct the interface.
  IProcessGroup() = default;
  /// Not copyable through the interface.
  IProcessGroup(const IProcessGroup&) = default;
  /// Not assignable through the interface.
  IProcessGroup& operator=(const IProcessGroup&) = default;
};

}  // namespace mlframework::distributed
