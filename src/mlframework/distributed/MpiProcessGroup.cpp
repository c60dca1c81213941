// MPI engine. MPI has no standard 16-bit float type: FP16/BF16 travel as MPI_UINT16_T words;
// sums use an all-to-all exchange plus a local vectorized combine, user-defined MPI_Ops (widen
// each block to FP32, add, round back) or a widen-reduce-narrow round trip through MPI_FLOAT,
// chosen by MpiProcessGroupOptions::HalfSum.
#include <mlframework/distributed/MpiProcessGroup.hpp>

#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/HostConversion.hpp>

#include "mlframework/distributed/HostStaging.hpp"
#include "mlframework/distributed/MpiAsync.hpp"
#include "mlframework/distributed/MpiCheck.hpp"
#include "mlframework/distributed/MpiOptions.hpp"

namespace mlframework::distributed {

using detail::Check;
using detail::CountOf;
using detail::MpiErrorString;

namespace {

// Bulk conversions of raw 16-bit words through core's host conversion: the CPU backend's
// vectorised casts (F16C / AVX-512 where the CPU has them), picked once per process, so there is
// no per-element dtype branch, and their ordinary stores need no fence before MPI reads the buffer.
void Widen(const void* src, DataType dtype, float* dst, std::size_t count) {
  ConvertHostElements(src, dtype, dst, DataType::Float32, count);
}

void Narrow(const float* src, void* dst, DataType dtype, std::size_t count) {
  ConvertHostElements(src, DataType::Float32, dst, dtype, count);
}

// Scratch bytes of the all-to-all reductions: each step exchanges at most this much per rank.
constexpr std::size_t kAllToAllScratchBytes = std::size_t{1} << 20;

// Elements combined per block in the user ops: both operands widened to floats on the stack.
constexpr int kOpBlock = 4096;

template <DataType D, bool kMax>
void HalfOp(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  std::array<float, kOpBlock> a{};
  std::array<float, kOpBlock> b{};
  const auto* source = static_cast<const std::uint16_t*>(in);
  auto* target = static_cast<std::uint16_t*>(inout);
  for (int start = 0; start < *len; start += kOpBlock) {
    const auto count = static_cast<std::size_t>(std::min(kOpBlock, *len - start));
    Widen(source + start, D, a.data(), count);
    Widen(target + start, D, b.data(), count);
    for (std::size_t i = 0; i < count; ++i) {
      if constexpr (kMax) {
        b[i] = a[i] > b[i] ? a[i] : b[i];
      } else {
        b[i] = a[i] + b[i];
      }
    }
    Narrow(b.data(), target + start, D, count);
  }
}

// Process-wide MPI state: whether we initialized MPI (and so must finalize it), the
// user-defined ops, created once, and the bounded agreement that precedes MPI_Finalize.
class MpiRuntime {
 public:
  static MpiRuntime& Get() {
    static MpiRuntime runtime;
    return runtime;
  }

  void EnsureInitialized() {
    std::lock_guard lock(mutex_);
    if (ready_) return;
    int initialized = 0;
    MLFW_MPI_CHECK(MPI_Initialized(&initialized));
    if (initialized == 0) {
      int provided = 0;
      MLFW_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
      we_initialized_ = true;
      // Our own copy of the world for the exit barrier: it never matches application traffic
      // and its errors are returned, so a failure there is reported instead of being fatal.
      MLFW_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &exit_comm_));
      MLFW_MPI_CHECK(MPI_Comm_set_errhandler(exit_comm_, MPI_ERRORS_RETURN));
    }
    MLFW_MPI_CHECK(MPI_Op_create(&HalfOp<DataType::Float16, false>, 1, &ops_[0]));
    MLFW_MPI_CHECK(MPI_Op_create(&HalfOp<DataType::Float16, true>, 1, &ops_[1]));
    MLFW_MPI_CHECK(MPI_Op_create(&HalfOp<DataType::BFloat16, false>, 1, &ops_[2]));
    MLFW_MPI_CHECK(MPI_Op_create(&HalfOp<DataType::BFloat16, true>, 1, &ops_[3]));
    ready_ = true;
  }

  // Several groups may ask for different limits: the most patient one wins.
  void RequestFinalizeTimeout(double seconds) {
    std::lock_guard lock(mutex_);
    finalize_timeout_s_ = std::max(finalize_timeout_s_, seconds);
  }

  MPI_Op HalfOpFor(DataType dtype, ReduceOp op) const {
    const std::size_t index = (dtype == DataType::BFloat16 ? 2u : 0u) + (op == ReduceOp::Max ? 1u : 0u);
    return ops_[index];
  }

  static bool Finalized() {
    int finalized = 0;
    return MPI_Finalized(&finalized) == MPI_SUCCESS && finalized != 0;
  }

  ~MpiRuntime() {
    if (!ready_ || Finalized()) return;
    for (MPI_Op& op : ops_) MPI_Op_free(&op);
    // Finalize only what we initialized; an application that called MPI_Init finalizes itself.
    if (!we_initialized_) return;
    AgreeToFinalize();
    MPI_Comm_free(&exit_comm_);
    MPI_Finalize();
  }

  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

 private:
  MpiRuntime() = default;

  // MPI_Finalize blocks until every rank calls it. A rank blocked in a collective that this
  // rank left (or that it entered after this rank left) never will, and the job would hang
  // forever. So every rank first meets the others in a non-blocking barrier, polled with a
  // deadline; on timeout MPI_Abort ends every rank, the blocked ones included.
  void AgreeToFinalize() {
    int rank = 0;
    int size = 1;
    MPI_Comm_rank(exit_comm_, &rank);
    MPI_Comm_size(exit_comm_, &size);
    if (size == 1) return;
    MPI_Request request = MPI_REQUEST_NULL;
    const int started = MPI_Ibarrier(exit_comm_, &request);
    if (started == MPI_SUCCESS) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(finalize_timeout_s_);
      // Spin briefly (all ranks usually arrive together), then poll every millisecond so a
      // waiting rank leaves the cores to the ranks still working.
      for (int polls = 0;; ++polls) {
        int done = 0;
        const int tested = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (tested != MPI_SUCCESS) {
          FinalizeAbort(rank, size, "the exit barrier failed: " + MpiErrorString(tested));
        }
        if (done != 0) return;
        if (std::chrono::steady_clock::now() >= deadline) break;
        if (polls >= kExitSpinPolls) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    } else {
      FinalizeAbort(rank, size, "the exit barrier could not start: " + MpiErrorString(started));
    }
    std::array<char, 32> limit{};
    std::snprintf(limit.data(), limit.size(), "%g", finalize_timeout_s_);
    FinalizeAbort(rank, size,
                  std::string("exiting, but not every rank reached MPI_Finalize within ") + limit.data() +
                      " s: another rank is blocked in a collective this rank never joined (or is still "
                      "working); aborting the job so that no rank hangs (MLFW_MPI_FINALIZE_TIMEOUT_S "
                      "sets the limit)");
  }

  [[noreturn]] void FinalizeAbort(int rank, int size, const std::string& what) {
    std::fprintf(stderr, "mlframework: rank %d of %d: %s\n", rank, size, what.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

  static constexpr int kExitSpinPolls = 1000;
  std::mutex mutex_;
  bool ready_ = false;
  bool we_initialized_ = false;
  MPI_Comm exit_comm_ = MPI_COMM_NULL;
  double finalize_timeout_s_ = 0.0;
  std::array<MPI_Op, 4> ops_{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

// MpiProcessGroupOptions::ShareCoresAmongLocalRanks: at most once per process, and only when
// the user left OMP_NUM_THREADS unset. Collective over @p comm (every rank splits it).
void ShareCoresAmongLocalRanks(MPI_Comm comm) {
  static std::once_flag once;
  std::call_once(once, [comm] {
    const char* chosen = std::getenv("OMP_NUM_THREADS");
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) {
      return;  // no node information: leave the threads as they are
    }
    int local_ranks = 1;
    MPI_Comm_size(node, &local_ranks);
    MPI_Comm_free(&node);
    if ((chosen != nullptr && *chosen != '\0') || local_ranks <= 1) {
      return;
    }
    const int share = std::max(1, omp_get_num_procs() / local_ranks);
    if (share < omp_get_max_threads()) {
      omp_set_num_threads(share);
    }
  });
}

}  // namespace

MPI_Op detail::MpiHalfOp(DataType dtype, ReduceOp op) { return MpiRuntime::Get().HalfOpFor(dtype, op); }

using detail::BuiltinOp;
using detail::WireType;

struct MpiProcessGroup::Impl {
  MpiProcessGroupOptions options;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm follow_up = MPI_COMM_NULL;             // the non-blocking all-reduces' second stage
  std::shared_ptr<detail::MpiAsyncEngine> async;  // the non-blocking collectives
  int rank = 0;
  int world_size = 1;
  // The all-to-all reductions' receive buffer (at most kAllToAllScratchBytes), reused.
  std::unique_ptr<std::byte[]> scratch;  // NOLINT(cppcoreguidelines-avoid-c-arrays)
  std::size_t scratch_bytes = 0;

  void* Scratch(std::size_t bytes);
  // Pipelined MPI_Alltoallv + CombineParts: rank r sends elements [displacements[d],
  // + counts[d]) of `send` to rank d and combines what it receives for its own range into `out`.
  void AllToAllCombine(const void* send, const std::vector<std::size_t>& counts,
                       const std::vector<std::size_t>& displacements, void* out, DataType dtype, ReduceOp op);
  // All-to-all reduce-scatter: `send` holds count * world_size elements, `recv` gets this
  // rank's part.
  void ReduceScatterByAllToAll(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op);
  // All-to-all all-reduce in place: every rank combines one part, then the parts are gathered.
  void AllReduceByAllToAll(void* data, std::size_t count, DataType dtype, ReduceOp op);

  // Reduces `count` elements of `dtype` from `send` (or in place when send is MPI_IN_PLACE)
  // into `recv`; scatter: chunk `rank` of the result only (recv holds count elements).
  void Reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, bool scatter) {
    const int n = CountOf(count, scatter ? "output" : "tensor");
    const bool all_to_all = dtype == DataType::Float32 ? options.Float32Sum == Float32Reduction::AllToAll
                                                       : options.HalfSum == HalfReduction::AllToAll;
    // MPI_Alltoallv's displacements are ints: tensors beyond that take the other methods.
    const std::size_t total = scatter ? count * static_cast<std::size_t>(world_size) : count;
    if (all_to_all && total <= static_cast<std::size_t>(INT_MAX)) {
      if (scatter) {
        ReduceScatterByAllToAll(send, recv, count, dtype, op);
      } else {
        AllReduceByAllToAll(recv, count, dtype, op);
      }
      return;
    }
    if (dtype == DataType::Float32) {
      if (scatter) {
        MLFW_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, BuiltinOp(op), comm));
      } else {
        MLFW_MPI_CHECK(MPI_Allreduce(send, recv, n, MPI_FLOAT, BuiltinOp(op), comm));
      }
      return;
    }
    if (options.HalfSum != HalfReduction::ConvertToFloat32) {  // UserOp, or AllToAll beyond int displacements
      const MPI_Op user_op = MpiRuntime::Get().HalfOpFor(dtype, op);
      if (scatter) {
        MLFW_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, n, MPI_UINT16_T, user_op, comm));
      } else {
        MLFW_MPI_CHECK(MPI_Allreduce(send, recv, n, MPI_UINT16_T, user_op, comm));
      }
      return;
    }
    // Widen, reduce in FP32, narrow once.
    std::vector<float> wide(total);
    Widen(send == MPI_IN_PLACE ? recv : send, dtype, wide.data(), total);
    if (scatter) {
      std::vector<float> part(count);
      MLFW_MPI_CHECK(MPI_Reduce_scatter_block(wide.data(), part.data(), n, MPI_FLOAT, BuiltinOp(op), comm));
      Narrow(part.data(), recv, dtype, count);
    } else {
      MLFW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, wide.data(), n, MPI_FLOAT, BuiltinOp(op), comm));
      Narrow(wide.data(), recv, dtype, count);
    }
  }
};

void MpiProcessGroup::Impl::ReduceScatterByAllToAll(const void* send, void* recv, std::size_t count, DataType dtype,
                                                    ReduceOp op) {
  const auto ranks = static_cast<std::size_t>(world_size);
  std::vector<std::size_t> counts(ranks, count);
  std::vector<std::size_t> displacements(ranks);
  for (std::size_t r = 0; r < ranks; ++r) displacements[r] = r * count;
  AllToAllCombine(send, counts, displacements, recv, dtype, op);
}

void MpiProcessGroup::Impl::AllReduceByAllToAll(void* data, std::size_t count, DataType dtype, ReduceOp op) {
  // Rank r owns elements [r * part, (r + 1) * part) clipped to the tensor (the last parts may
  // be short or empty when count is not a multiple of the world size).
  const auto ranks = static_cast<std::size_t>(world_size);
  const std::size_t part = (count + ranks - 1) / ranks;
  std::vector<std::size_t> counts(ranks);
  std::vector<std::size_t> displacements(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    displacements[r] = std::min(count, r * part);
    counts[r] = std::min(count, displacements[r] + part) - displacements[r];
  }
  const auto me = static_cast<std::size_t>(rank);
  const std::size_t element = ElementSize(dtype);
  AllToAllCombine(data, counts, displacements, static_cast<std::byte*>(data) + displacements[me] * element, dtype, op);
  std::vector<int> gather_counts(ranks);
  std::vector<int> gather_displacements(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    gather_counts[r] = static_cast<int>(counts[r]);
    gather_displacements[r] = static_cast<int>(displacements[r]);
  }
  MLFW_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, gather_counts.data(),
                                gather_displacements.data(), WireType(dtype), comm));
}

void MpiProcessGroup::Impl::AllToAllCombine(const void* send, const std::vector<std::size_t>& counts,
                                            const std::vector<std::size_t>& displacements, void* out, DataType dtype,
                                            ReduceOp op) {
  const auto ranks = static_cast<std::size_t>(world_size);
  const auto me = static_cast<std::size_t>(rank);
  const std::size_t element = ElementSize(dtype);
  // Pieces of at most `piece` elements per rank, so the scratch stays within kAllToAllScratchBytes
  // (no unit-sized buffer on top of FSDP's ZeRO-3 memory figure) and the combine reads it back
  // from cache. Every rank runs the same number of steps: that of the longest part.
  const std::size_t piece = std::max<std::size_t>(1, kAllToAllScratchBytes / (ranks * element));
  const std::size_t longest = *std::max_element(counts.begin(), counts.end());
  auto* parts = static_cast<std::byte*>(Scratch(std::min(longest, piece) * ranks * element));
  std::vector<int> send_counts(ranks);
  std::vector<int> send_displacements(ranks);
  std::vector<int> receive_counts(ranks);
  std::vector<int> receive_displacements(ranks);
  const MPI_Datatype type = WireType(dtype);
  for (std::size_t offset = 0; offset < longest; offset += piece) {
    const auto piece_of = [&](std::size_t length) { return offset < length ? std::min(piece, length - offset) : 0; };
    const std::size_t mine = piece_of(counts[me]);
    for (std::size_t r = 0; r < ranks; ++r) {
      send_counts[r] = static_cast<int>(piece_of(counts[r]));
      send_displacements[r] = static_cast<int>(displacements[r] + std::min(offset, counts[r]));
      receive_counts[r] = static_cast<int>(mine);
      receive_displacements[r] = static_cast<int>(r * mine);
    }
    MLFW_MPI_CHECK(MPI_Alltoallv(send, send_counts.data(), send_displacements.data(), type, parts,
                                 receive_counts.data(), receive_displacements.data(), type, comm));
    detail::CombineParts(parts, world_size, mine, dtype, op, static_cast<std::byte*>(out) + offset * element);
  }
}

void* MpiProcessGroup::Impl::Scratch(std::size_t bytes) {
  if (bytes > scratch_bytes) {
    // Not value-initialized: MPI writes every byte before the combine reads it.
    scratch.reset();
    scratch_bytes = 0;
    scratch.reset(new std::byte[bytes]);  // NOLINT(cppcoreguidelines-owning-memory)
    scratch_bytes = bytes;
  }
  return scratch.get();
}

MpiProcessGroup::MpiProcessGroup(MpiProcessGroupOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.HalfSum != HalfReduction::UserOp && options.HalfSum != HalfReduction::ConvertToFloat32 &&
      options.HalfSum != HalfReduction::AllToAll) {
    throw ArgumentError("options.HalfSum",
                        "unknown HalfReduction " + std::to_string(static_cast<int>(options.HalfSum)));
  }
  if (options.Float32Sum != Float32Reduction::Builtin && options.Float32Sum != Float32Reduction::AllToAll) {
    throw ArgumentError("options.Float32Sum",
                        "unknown Float32Reduction " + std::to_string(static_cast<int>(options.Float32Sum)));
  }
  const double finalize_timeout = detail::FinalizeTimeoutOf(options);
  options.Wait = detail::WaitModeOf(options);
  MpiRuntime::Get().EnsureInitialized();
  MpiRuntime::Get().RequestFinalizeTimeout(finalize_timeout);
  const std::lock_guard mpi(detail::MpiCallLock());  // other groups' progress threads may be testing
  MPI_Comm parent = MPI_COMM_WORLD;
  if (options.Communicator) {
    parent = MPI_Comm_f2c(static_cast<MPI_Fint>(*options.Communicator));
    if (parent == MPI_COMM_NULL) {
      throw ArgumentError("options.Communicator",
                          "Fortran handle " + std::to_string(*options.Communicator) + " is MPI_COMM_NULL");
    }
  }
  // Our own duplicate: errors are returned (not fatal) and our traffic never matches the app's.
  // An invalid handle is reported through MPI_COMM_WORLD's handler (fatal by default), so that
  // handler returns errors for the duration of the dup and is restored right after.
  MPI_Errhandler world_handler = MPI_ERRHANDLER_NULL;
  MLFW_MPI_CHECK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world_handler));
  MLFW_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  const int dup_result = MPI_Comm_dup(parent, &impl_->comm);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, world_handler);
  MPI_Errhandler_free(&world_handler);
  if (dup_result != MPI_SUCCESS) impl_->comm = MPI_COMM_NULL;
  Check(dup_result, "MPI_Comm_dup");
  try {
    MLFW_MPI_CHECK(MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN));
    MLFW_MPI_CHECK(MPI_Comm_rank(impl_->comm, &impl_->rank));
    MLFW_MPI_CHECK(MPI_Comm_size(impl_->comm, &impl_->world_size));
    if (options.ShareCoresAmongLocalRanks) {
      ShareCoresAmongLocalRanks(impl_->comm);
    }
    MLFW_MPI_CHECK(MPI_Comm_dup(impl_->comm, &impl_->follow_up));
  } catch (...) {
    MPI_Comm_free(&impl_->comm);
    throw;
  }
  impl_->options = options;
  impl_->async =
      std::make_shared<detail::MpiAsyncEngine>(impl_->comm, impl_->follow_up, impl_->rank, impl_->world_size, options);
}

MpiProcessGroup::~MpiProcessGroup() {
  if (impl_->async) impl_->async->Shutdown();  // outstanding requests use the communicators
  if (MpiRuntime::Finalized()) return;
  const std::lock_guard mpi(detail::MpiCallLock());
  if (impl_->follow_up != MPI_COMM_NULL) MPI_Comm_free(&impl_->follow_up);
  if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

std::shared_ptr<IProcessGroup> MpiProcessGroup::Split(int color, int key) {
  detail::CheckSplitColor(color);
  MPI_Comm part = MPI_COMM_NULL;
  {
    const std::lock_guard mpi(detail::MpiCallLock());  // not held over the constructor, which takes it
    MLFW_MPI_CHECK(MPI_Comm_split(impl_->comm, color, key, &part));
  }
  // The new group duplicates the split communicator (as it does any communicator it is given),
  // so the split itself is freed here whatever happens.
  const auto free_part = [&part] {
    const std::lock_guard mpi(detail::MpiCallLock());
    MPI_Comm_free(&part);
  };
  MpiProcessGroupOptions options = impl_->options;
  options.Communicator = static_cast<std::int64_t>(MPI_Comm_c2f(part));
  try {
    auto group = std::make_shared<MpiProcessGroup>(options);
    free_part();
    return group;
  } catch (...) {
    free_part();
    throw;
  }
}

int MpiProcessGroup::Rank() const noexcept { return impl_->rank; }
int MpiProcessGroup::WorldSize() const noexcept { return impl_->world_size; }
std::string_view MpiProcessGroup::BackendName() const noexcept { return "mpi"; }
const MpiProcessGroupOptions& MpiProcessGroup::Options() const noexcept { return impl_->options; }

void MpiProcessGroup::AllGather(const ITensor& input, ITensor& output) {
  const std::lock_guard mpi(detail::MpiCallLock());
  detail::CheckGatherSizes(input, output, impl_->world_size);
  const int n = CountOf(input.Size(), "input");
  const MPI_Datatype type = WireType(input.GetDataType());
  detail::HostRead source(input);
  detail::HostWrite target(output, false);
  impl_->async->AwaitPeers();
  // Input already in this rank's slot of the output (FSDP casts its shard there): gather in
  // place. Any other overlap would be an aliasing error for MPI, so it is refused.
  const std::size_t slot_bytes = input.Size() * ElementSize(input.GetDataType());
  const auto* out_first = static_cast<const std::byte*>(target.Data());
  const auto* in_first = static_cast<const std::byte*>(source.Data());
  const auto* slot = out_first + slot_bytes * static_cast<std::size_t>(impl_->rank);
  if (in_first == slot) {
    MLFW_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, n, type, target.Data(), n, type, impl_->comm));
  } else {
    const auto* out_last = out_first + slot_bytes * static_cast<std::size_t>(impl_->world_size);
    if (n > 0 && in_first < out_last && out_first < in_first + slot_bytes) {
      throw ArgumentError("input", "AllGather: input overlaps the output other than exactly at this rank's slot");
    }
    MLFW_MPI_CHECK(MPI_Allgather(source.Data(), n, type, target.Data(), n, type, impl_->comm));
  }
  target.Commit();
}

void MpiProcessGroup::ReduceScatter(const ITensor& input, ITensor& output, ReduceOp op) {
  const std::lock_guard mpi(detail::MpiCallLock());
  detail::CheckOp(op);
  detail::CheckScatterSizes(input, output, impl_->world_size);
  detail::HostRead source(input);
  detail::HostWrite target(output, false);
  impl_->async->AwaitPeers();
  impl_->Reduce(source.Data(), target.Data(), output.Size(), input.GetDataType(), op, true);
  target.Commit();
}

void MpiProcessGroup::AllReduce(ITensor& tensor, ReduceOp op) {
  const std::lock_guard mpi(detail::MpiCallLock());
  detail::CheckOp(op);
  detail::CheckCollectiveDType("AllReduce", tensor);
  detail::HostWrite target(tensor, true);
  impl_->async->AwaitPeers();
  impl_->Reduce(MPI_IN_PLACE, target.Data(), tensor.Size(), tensor.GetDataType(), op, false);
  target.Commit();
}

void MpiProcessGroup::AllToAll(const ITensor& input, ITensor& output) {
  const std::lock_guard mpi(detail::MpiCallLock());
  detail::CheckAllToAllSizes(input, output, impl_->world_size);
  const int n = CountOf(input.Size() / static_cast<std::size_t>(impl_->world_size), "input");
  const MPI_Datatype type = WireType(input.GetDataType());
  detail::HostRead source(input);
  detail::HostWrite target(output, false);
  impl_->async->AwaitPeers();
  MLFW_MPI_CHECK(MPI_Alltoall(source.Data(), n, type, target.Data(), n, type, impl_->comm));
  target.Commit();
}

void MpiProcessGroup::Broadcast(ITensor& tensor, int root) {
  const std::lock_guard mpi(detail::MpiCallLock());
  detail::CheckRoot(root, impl_->world_size);
  detail::CheckCollectiveDType("Broadcast", tensor);
  const int n = CountOf(tensor.Size(), "tensor");
  detail::HostWrite target(tensor, true);
  impl_->async->AwaitPeers();
  MLFW_MPI_CHECK(MPI_Bcast(target.Data(), n, WireType(tensor.GetDataType()), root, impl_->comm));
  target.Commit();
}

void MpiProcessGroup::Barrier() {
  const std::lock_guard mpi(detail::MpiCallLock());
  if (!impl_->async->AwaitPeers()) MLFW_MPI_CHECK(MPI_Barrier(impl_->comm));
}

void MpiProcessGroup::AllReduceHost(std::span<double> values, ReduceOp op) {
  detail::CheckOp(op);
  if (values.empty()) return;
  const int n = CountOf(values.size(), "values");
  const std::lock_guard mpi(detail::MpiCallLock());
  impl_->async->AwaitPeers();
  MLFW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values.data(), n, MPI_DOUBLE, BuiltinOp(op), impl_->comm));
}

// The non-blocking forms: host tensors go to the group's MpiAsyncEngine, staged ones take the
// blocking defaults of IProcessGroup.

CollectiveRequestPtr MpiProcessGroup::AllGatherAsync(const ITensor& input, ITensor& output) {
  if (!detail::MpiAsyncEngine::Stageless(input, output)) return IProcessGroup::AllGatherAsync(input, output);
  return impl_->async->AllGather(input, output);
}

CollectiveRequestPtr MpiProcessGroup::ReduceScatterAsync(const ITensor& input, ITensor& output, ReduceOp op) {
  if (!detail::MpiAsyncEngine::Stageless(input, output)) return IProcessGroup::ReduceScatterAsync(input, output, op);
  return impl_->async->ReduceScatter(input, output, op);
}

CollectiveRequestPtr MpiProcessGroup::AllGatherAsyncAfter(std::function<void()> prepare, const ITensor& input,
                                                          ITensor& output) {
  if (!detail::MpiAsyncEngine::Stageless(input, output)) {
    return IProcessGroup::AllGatherAsyncAfter(std::move(prepare), input, output);
  }
  return impl_->async->AllGather(input, output, std::move(prepare));
}

CollectiveRequestPtr MpiProcessGroup::ReduceScatterAsyncThen(const ITensor& input, ITensor& output, ReduceOp op,
                                                             std::function<void()> finish) {
  if (!detail::MpiAsyncEngine::Stageless(input, output)) {
    return IProcessGroup::ReduceScatterAsyncThen(input, output, op, std::move(finish));
  }
  return impl_->async->ReduceScatter(input, output, op, std::move(finish));
}

CollectiveRequestPtr MpiProcessGroup::AllReduceAsync(ITensor& tensor, ReduceOp op) {
  if (!detail::MpiAsyncEngine::Stageless(tensor, tensor)) return IProcessGroup::AllReduceAsync(tensor, op);
  return impl_->async->AllReduce(tensor, op);
}

void MpiProcessGroup::Abort(const std::string& message) noexcept {
  std::fprintf(stderr, "mlframework: rank %d of %d aborting the MPI job: %s\n", impl_->rank, impl_->world_size,
               message.c_str());
  std::fflush(stderr);
  if (!MpiRuntime::Finalized()) MPI_Abort(impl_->comm != MPI_COMM_NULL ? impl_->comm : MPI_COMM_WORLD, 1);
  std::abort();
}

bool MpiAvailable() noexcept { return true; }

std::shared_ptr<IProcessGroup> MakeMpiProcessGroup(MpiProcessGroupOptions options) {
  return std::make_shared<MpiProcessGroup>(options);
}

}  // namespace mlframework::distributed
