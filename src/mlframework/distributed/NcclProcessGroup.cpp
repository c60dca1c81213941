#include <mlframework/distributed/NcclProcessGroup.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/DeviceContext.hpp"
#include "mlframework/distributed/HostStaging.hpp"
#include "mlframework/distributed/NcclCheck.hpp"

namespace mlframework::distributed {

namespace {

namespace cuda = backends::cuda;

static_assert(sizeof(ncclUniqueId) == std::tuple_size_v<NcclUniqueId>, "NcclUniqueId must hold an ncclUniqueId");

ncclDataType_t NcclType(DataType dtype) {
  switch (dtype) {
    case DataType::Float16:
      return ncclFloat16;
    case DataType::BFloat16:
      return ncclBfloat16;
    case DataType::Float32:
      break;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) { return op == ReduceOp::Max ? ncclMax : ncclSum; }

// Device memory for one tensor of a collective: the tensor itself when it is a CUDA
// tensor on the group's device, otherwise a CUDA copy written back by Commit().
class DeviceOperand {
 public:
  DeviceOperand(const ITensor& tensor, int device, bool keep_contents) {
    if (cuda::IsCudaTensor(tensor) && tensor.GetDevice() == Device::CUDA(device)) {
      pointer_ = cuda::DevicePointer(const_cast<ITensor&>(tensor));
      return;
    }
    // 16-bit values widen to float exactly, so the round trip through floats is lossless.
    staged_ = keep_contents
                  ? FromVector(tensor.ToFloatVector(), tensor.GetShape(), tensor.GetDataType(), Device::CUDA(device))
                  : Zeros(tensor.GetShape(), tensor.GetDataType(), Device::CUDA(device));
    pointer_ = cuda::DevicePointer(*staged_);
  }
  void* Pointer() const noexcept { return pointer_; }
  void Commit(ITensor& tensor) const {
    if (staged_) {
      tensor.CopyFromFloats(staged_->ToFloatVector());
    }
  }

 private:
  TensorPtr staged_;
  void* pointer_ = nullptr;
};

class NcclProcessGroup final : public IProcessGroup {
 public:
  NcclProcessGroup(const NcclUniqueId& id, int rank, int world_size, NcclProcessGroupOptions options)
      : rank_(rank), world_size_(world_size), options_(options), context_(&cuda::DeviceContext::Get(options.Device)) {
    cuda::DeviceGuard guard(options_.Device);
    ncclUniqueId nccl_id;
    std::memcpy(&nccl_id, id.data(), sizeof nccl_id);
    MLFW_NCCL_CHECK(ncclCommInitRank(&comm_, world_size_, nccl_id, rank_));
    try {
      scratch_ = static_cast<double*>(context_->Allocate(kScratchDoubles * sizeof(double)));
    } catch (...) {
      static_cast<void>(ncclCommDestroy(comm_));
      throw;
    }
  }

  ~NcclProcessGroup() override {
    if (comm_ != nullptr) {
      int previous = -1;
      const bool switched = cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(options_.Device) == cudaSuccess;
      // Destroy waits for queued collectives; after a failure the communicator was already aborted.
      static_cast<void>(aborted_ ? ncclSuccess : ncclCommDestroy(comm_));
      if (switched && previous >= 0) {
        MLFW_CUDA_CHECK_NOTHROW(cudaSetDevice(previous));
      }
    }
    context_->Free(scratch_);
  }
  NcclProcessGroup(const NcclProcessGroup&) = delete;
  NcclProcessGroup& operator=(const NcclProcessGroup&) = delete;

  int Rank() const noexcept override { return rank_; }
  int WorldSize() const noexcept override { return world_size_; }
  std::string_view BackendName() const noexcept override { return "nccl"; }

  void AllGather(const ITensor& input, ITensor& output) override {
    detail::CheckGatherSizes(input, output, world_size_);
    Run("AllGather", [&] {
      const DeviceOperand in(input, options_.Device, true);
      const DeviceOperand out(output, options_.Device, false);
      MLFW_NCCL_CHECK(
          ncclAllGather(in.Pointer(), out.Pointer(), input.Size(), NcclType(input.GetDataType()), comm_, Stream()));
      Wait("ncclAllGather");
      out.Commit(output);
    });
  }

  void ReduceScatter(const ITensor& input, ITensor& output, ReduceOp op) override {
    detail::CheckOp(op);
    detail::CheckScatterSizes(input, output, world_size_);
    Run("ReduceScatter", [&] {
      const DeviceOperand in(input, options_.Device, true);
      const DeviceOperand out(output, options_.Device, false);
      MLFW_NCCL_CHECK(ncclReduceScatter(in.Pointer(), out.Pointer(), output.Size(), NcclType(input.GetDataType()),
                                        NcclOp(op), comm_, Stream()));
      Wait("ncclReduceScatter");
      out.Commit(output);
    });
  }

  void AllReduce(ITensor& tensor, ReduceOp op) override {
    detail::CheckOp(op);
    Run("AllReduce", [&] {
      const DeviceOperand data(tensor, options_.Device, true);
      MLFW_NCCL_CHECK(ncclAllReduce(data.Pointer(), data.Pointer(), tensor.Size(), NcclType(tensor.GetDataType()),
                                    NcclOp(op), comm_, Stream()));
      Wait("ncclAllReduce");
      data.Commit(tensor);
    });
  }

  void Broadcast(ITensor& tensor, int root) override {
    detail::CheckRoot(root, world_size_);
    Run("Broadcast", [&] {
      const DeviceOperand data(tensor, options_.Device, true);
      MLFW_NCCL_CHECK(ncclBroadcast(data.Pointer(), data.Pointer(), tensor.Size(), NcclType(tensor.GetDataType()), root,
                                    comm_, Stream()));
      Wait("ncclBroadcast");
      data.Commit(tensor);
    });
  }

  void Barrier() override {
    // NCCL has no barrier: an all-reduce of one value that every rank must enter.
    Run("Barrier", [&] {
      MLFW_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclFloat64, ncclSum, comm_, Stream()));
      Wait("ncclAllReduce (barrier)");
    });
  }

  void AllReduceHost(std::span<double> values, ReduceOp op) override {
    detail::CheckOp(op);
    Run("AllReduceHost", [&] {
      for (std::size_t first = 0; first < values.size(); first += kScratchDoubles) {
        const std::size_t count = std::min(kScratchDoubles, values.size() - first);
        MLFW_CUDA_CHECK(
            cudaMemcpyAsync(scratch_, values.data() + first, count * sizeof(double), cudaMemcpyHostToDevice, Stream()));
        MLFW_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, count, ncclFloat64, NcclOp(op), comm_, Stream()));
        MLFW_CUDA_CHECK(
            cudaMemcpyAsync(values.data() + first, scratch_, count * sizeof(double), cudaMemcpyDeviceToHost, Stream()));
        Wait("ncclAllReduce (host values)");
      }
    });
  }
  using IProcessGroup::AllReduceHost;

  void Abort(const std::string& message) noexcept override {
    std::fprintf(stderr, "mlframework: rank %d aborting: %s\n", rank_, message.c_str());
    std::fflush(stderr);
    AbortCommunicator();
    // The other ranks see the aborted peer as an NCCL error in their next wait and throw.
    std::_Exit(EXIT_FAILURE);
  }

 private:
  static constexpr std::size_t kScratchDoubles = 4096;

  cudaStream_t Stream() const noexcept { return context_->Stream(); }

  // Runs one collective; a communication failure aborts the communicator (it cannot be
  // trusted afterwards) and propagates.
  template <typename Fn>
  void Run(const char* what, Fn&& fn) {
    if (aborted_) {
      throw CommunicationError(std::string(what) + ": the NCCL communicator of rank " + std::to_string(rank_) +
                               " was aborted after an earlier failure");
    }
    cuda::DeviceGuard guard(options_.Device);
    try {
      fn();
    } catch (const CommunicationError&) {
      AbortCommunicator();
      throw;
    }
  }

  // Waits for the stream without blocking in the driver, so an asynchronous NCCL error
  // (a peer died) or the timeout ends the wait instead of hanging.
  void Wait(const char* call) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t status = cudaStreamQuery(Stream());
      if (status == cudaSuccess) {
        return;
      }
      if (status != cudaErrorNotReady) {
        static_cast<void>(cudaGetLastError());
        throw CommunicationError(std::string(call) + " failed on cuda:" + std::to_string(options_.Device) + ": " +
                                 cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
      }
      ncclResult_t async = ncclSuccess;
      MLFW_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        const char* last = ncclGetLastError(comm_);
        throw CommunicationError(std::string(call) + " failed: " + ncclGetErrorString(async) +
                                 (last != nullptr && last[0] != '\0' ? " (" + std::string(last) + ")" : ""));
      }
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (options_.TimeoutSeconds > 0.0 && waited > options_.TimeoutSeconds) {
        throw CommunicationError(std::string(call) + " did not finish within " +
                                 std::to_string(options_.TimeoutSeconds) + " s on rank " + std::to_string(rank_) +
                                 " (a rank died or did not enter the collective)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void AbortCommunicator() noexcept {
    if (comm_ != nullptr && !aborted_) {
      aborted_ = true;
      static_cast<void>(ncclCommAbort(comm_));
    }
  }

  int rank_;
  int world_size_;
  NcclProcessGroupOptions options_;
  cuda::DeviceContext* context_;
  ncclComm_t comm_ = nullptr;
  double* scratch_ = nullptr;
  bool aborted_ = false;
};

void ValidateOptions(NcclProcessGroupOptions& options, int rank) {
  if (!(options.TimeoutSeconds >= 0.0)) {
    throw ArgumentError("options.TimeoutSeconds", "must be >= 0, got " + std::to_string(options.TimeoutSeconds));
  }
  if (options.Device < -1) {
    throw ArgumentError("options.Device",
                        "must be -1 (automatic) or a device ordinal, got " + std::to_string(options.Device));
  }
  if (options.Device == -1) {
    std::string reason;
    const int count = cuda::QueryDeviceCount(&reason);
    if (count == 0) {
      throw BackendError("cannot form an NCCL process group: " + reason);
    }
    options.Device = rank % count;
  }
}

}  // namespace

bool NcclAvailable() noexcept { return true; }

NcclUniqueId MakeNcclUniqueId() {
  ncclUniqueId nccl_id;
  MLFW_NCCL_CHECK(ncclGetUniqueId(&nccl_id));
  NcclUniqueId id{};
  std::memcpy(id.data(), &nccl_id, sizeof nccl_id);
  return id;
}

std::shared_ptr<IProcessGroup> MakeNcclProcessGroup(const NcclUniqueId& id, int rank, int world_size,
                                                    NcclProcessGroupOptions options) {
  if (world_size < 1) {
    throw ArgumentError("world_size", "must be >= 1, got " + std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw ArgumentError("rank", "must be in [0, " + std::to_string(world_size) + "), got " + std::to_string(rank));
  }
  ValidateOptions(options, rank);
  return std::make_shared<NcclProcessGroup>(id, rank, world_size, options);
}

std::shared_ptr<IProcessGroup> MakeNcclProcessGroup(IProcessGroup& bootstrap, NcclProcessGroupOptions options) {
  // Bytes of the id as doubles, plus a failure flag: rank 0 fills them, the others send
  // zeros, and a MAX all-reduce hands rank 0's values to everyone, failure included.
  std::vector<double> shared(std::tuple_size_v<NcclUniqueId> + 1, 0.0);
  std::string failure;
  if (bootstrap.Rank() == 0) {
    try {
      const NcclUniqueId id = MakeNcclUniqueId();
      for (std::size_t i = 0; i < id.size(); ++i) {
        shared[i] = id[i];
      }
    } catch (const Error& e) {
      failure = e.what();
      shared.back() = 1.0;
    }
  }
  bootstrap.AllReduceHost(shared, ReduceOp::Max);
  if (shared.back() != 0.0) {
    throw CommunicationError("rank 0 could not create the NCCL unique id" +
                             (failure.empty() ? std::string() : ": " + failure));
  }
  NcclUniqueId id{};
  for (std::size_t i = 0; i < id.size(); ++i) {
    id[i] = static_cast<std::uint8_t>(shared[i]);
  }
  return MakeNcclProcessGroup(id, bootstrap.Rank(), bootstrap.WorldSize(), options);
}

}  // namespace mlframework::distributed
