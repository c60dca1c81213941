#include <mlframework/distributed/NcclProcessGroup.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
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
#include "mlframework/distributed/NcclDriver.hpp"
#include "mlframework/distributed/NcclRequest.hpp"
#include "mlframework/distributed/PendingCollectives.hpp"

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
    case DataType::Float8E4M3FN:
    case DataType::Float8E5M2:  // all-gathers only (the reductions refuse FP8): bytes
      return ncclUint8;
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
  /// The device memory @p tensor (the one this was made for) reads or writes as a collective's operand.
  cuda::BufferUse Read(const ITensor& tensor) const noexcept {
    return {pointer_, tensor.Size() * ElementSize(tensor.GetDataType()), cuda::Use::Read};
  }
  cuda::BufferUse Written(const ITensor& tensor) const noexcept {
    return {pointer_, tensor.Size() * ElementSize(tensor.GetDataType()), cuda::Use::Write};
  }
  /// True when the tensor went through a copy: the collective must finish before Commit().
  bool Staged() const noexcept { return staged_ != nullptr; }
  void Commit(ITensor& tensor) const {
    if (staged_) {
      tensor.CopyFromFloats(staged_->ToFloatVector());
    }
  }

 private:
  TensorPtr staged_;
  void* pointer_ = nullptr;
};

// Completion events of pending collectives, reused (creating one per collective would
// cost a driver call each). Acquire() runs on the owner's thread with the group's device
// current; Release() also runs on the watchdog thread, hence the mutex.
class EventPool {
 public:
  explicit EventPool(cuda::Driver& driver) : driver_(&driver) {}
  ~EventPool() { DestroyAll(); }
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  cudaEvent_t Acquire() {
    {
      const std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        cudaEvent_t event = free_.back();
        free_.pop_back();
        return event;
      }
    }
    cudaEvent_t event = nullptr;
    MLFW_CUDA_CHECK(driver_->EventCreate(&event));
    return event;
  }

  void Release(cudaEvent_t event) noexcept {
    const std::lock_guard lock(mutex_);
    try {
      free_.push_back(event);
    } catch (const std::bad_alloc&) {
      MLFW_CUDA_CHECK_NOTHROW(driver_->EventDestroy(event));
    }
  }

  /// Destroys every pooled event (the group's device current).
  void DestroyAll() noexcept {
    const std::lock_guard lock(mutex_);
    for (cudaEvent_t event : free_) {
      MLFW_CUDA_CHECK_NOTHROW(driver_->EventDestroy(event));
    }
    free_.clear();
  }

 private:
  cuda::Driver* driver_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

// How often the watchdog polls while collectives are pending (PyTorch's watchdog: 100 ms).
constexpr std::chrono::milliseconds kWatchdogInterval{50};

class NcclProcessGroup final : public IProcessGroup {
 public:
  NcclProcessGroup(const NcclUniqueId& id, int rank, int world_size, NcclProcessGroupOptions options)
      : rank_(rank),
        world_size_(world_size),
        options_(options),
        context_(&cuda::DeviceContext::Get(options.Device)),
        nccl_(&detail::ActiveNcclDriver()),
        events_(context_->DeviceDriver()) {
    cuda::DeviceGuard guard(options_.Device);
    ncclUniqueId nccl_id;
    std::memcpy(&nccl_id, id.data(), sizeof nccl_id);
    MLFW_NCCL_CHECK(nccl_->CommInitRank(&comm_, world_size_, nccl_id, rank_));
    Start();
  }

  /// Takes over @p comm (from ncclCommSplit), of which this process is @p rank of @p world_size.
  NcclProcessGroup(ncclComm_t comm, int rank, int world_size, NcclProcessGroupOptions options)
      : rank_(rank),
        world_size_(world_size),
        options_(options),
        context_(&cuda::DeviceContext::Get(options.Device)),
        nccl_(&detail::ActiveNcclDriver()),
        comm_(comm),
        events_(context_->DeviceDriver()) {
    cuda::DeviceGuard guard(options_.Device);
    Start();
  }

  ~NcclProcessGroup() override {
    // The watchdog stops first: after it no other thread touches CUDA or the communicator.
    pending_->StopWatchdog();
    cuda::Driver& driver = Cuda();
    int previous = -1;
    const bool switched =
        driver.GetDevice(&previous) == cudaSuccess && driver.SetDevice(options_.Device) == cudaSuccess;
    // Work still pending finishes (or fails, bounded by the timeout, and aborts the
    // communicator) before the communicator is destroyed.
    static_cast<void>(pending_->Drain());
    pending_.reset();
    events_.DestroyAll();
    // Frees queued from now on need not wait for this group's stream: the drain waited for it.
    context_->StopOrderingFreesAfter(comm_tail_);
    MLFW_CUDA_CHECK_NOTHROW(driver.EventDestroy(comm_tail_));
    MLFW_CUDA_CHECK_NOTHROW(driver.StreamDestroy(comm_stream_));
    context_->Free(scratch_);
    MLFW_CUDA_CHECK_NOTHROW(driver.FreeHost(host_scratch_));
    {
      const std::lock_guard lock(comm_mutex_);
      // After a failure the communicator was already aborted (which freed it).
      if (!aborted_) {
        MLFW_NCCL_CHECK_NOTHROW(nccl_->CommDestroy(comm_));
      }
    }
    if (switched && previous >= 0) {
      MLFW_CUDA_CHECK_NOTHROW(driver.SetDevice(previous));
    }
  }
  NcclProcessGroup(const NcclProcessGroup&) = delete;
  NcclProcessGroup& operator=(const NcclProcessGroup&) = delete;

  int Rank() const noexcept override { return rank_; }
  int WorldSize() const noexcept override { return world_size_; }
  std::string_view BackendName() const noexcept override { return "nccl"; }

  void AllGather(const ITensor& input, ITensor& output) override {
    detail::CheckGatherSizes(input, output, world_size_);
    InputToOutput("AllGather", "ncclAllGather", input, output, [&](const void* send, void* recv, ncclComm_t comm) {
      return ncclAllGather(send, recv, input.Size(), NcclType(input.GetDataType()), comm, Stream());
    });
  }

  void ReduceScatter(const ITensor& input, ITensor& output, ReduceOp op) override {
    detail::CheckOp(op);
    detail::CheckScatterSizes(input, output, world_size_);
    InputToOutput("ReduceScatter", "ncclReduceScatter", input, output,
                  [&](const void* send, void* recv, ncclComm_t comm) {
                    return ncclReduceScatter(send, recv, output.Size(), NcclType(input.GetDataType()), NcclOp(op), comm,
                                             Stream());
                  });
  }

  void AllReduce(ITensor& tensor, ReduceOp op) override {
    detail::CheckOp(op);
    detail::CheckCollectiveDType("AllReduce", tensor);
    InPlace("AllReduce", "ncclAllReduce", tensor, [&](void* data, ncclComm_t comm) {
      return ncclAllReduce(data, data, tensor.Size(), NcclType(tensor.GetDataType()), NcclOp(op), comm, Stream());
    });
  }

  void AllToAll(const ITensor& input, ITensor& output) override {
    detail::CheckAllToAllSizes(input, output, world_size_);
    // NCCL has no all-to-all collective: one send and one receive per peer in one group, which
    // NCCL runs as one operation on the stream.
    InputToOutput("AllToAll", "ncclSend/ncclRecv (all-to-all)", input, output,
                  [&](const void* send, void* recv, ncclComm_t comm) {
                    const std::size_t chunk = input.Size() / static_cast<std::size_t>(world_size_);
                    const std::size_t bytes = chunk * ElementSize(input.GetDataType());
                    const ncclDataType_t type = NcclType(input.GetDataType());
                    ncclResult_t result = ncclGroupStart();
                    for (int peer = 0; peer < world_size_ && result == ncclSuccess; ++peer) {
                      const std::size_t at = static_cast<std::size_t>(peer) * bytes;
                      result = ncclSend(static_cast<const std::byte*>(send) + at, chunk, type, peer, comm, Stream());
                      if (result == ncclSuccess) {
                        result = ncclRecv(static_cast<std::byte*>(recv) + at, chunk, type, peer, comm, Stream());
                      }
                    }
                    const ncclResult_t ended = ncclGroupEnd();
                    return result != ncclSuccess ? result : ended;
                  });
  }

  void Broadcast(ITensor& tensor, int root) override {
    detail::CheckRoot(root, world_size_);
    detail::CheckCollectiveDType("Broadcast", tensor);
    InPlace("Broadcast", "ncclBroadcast", tensor, [&](void* data, ncclComm_t comm) {
      return ncclBroadcast(data, data, tensor.Size(), NcclType(tensor.GetDataType()), root, comm, Stream());
    });
  }

  void Barrier() override {
    // NCCL has no barrier: an all-reduce of one value that every rank must enter, waited for.
    Run("Barrier", [&] {
      Enqueue("ncclAllReduce (barrier)", true, [&](ncclComm_t comm) {
        const cuda::BufferUse scratch{scratch_, sizeof(double), cuda::Use::ReadWrite};
        Collective("ncclAllReduce (barrier)", Stream(), scratch, {},
                   [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat64, ncclSum, comm, Stream()); });
      });
    });
  }

  void AllReduceHost(std::span<double> values, ReduceOp op) override {
    detail::CheckOp(op);
    Run("AllReduceHost", [&] {
      for (std::size_t first = 0; first < values.size(); first += kScratchDoubles) {
        const std::size_t count = std::min(kScratchDoubles, values.size() - first);
        const std::size_t bytes = count * sizeof(double);
        // Both copies go through pinned memory, so neither can block the host: a copy from or
        // to pageable memory may wait for the stream, which a dead peer never lets finish, and
        // only the watchdog's wait below is bounded by the timeout. The previous chunk was
        // waited for, so the pinned buffer is free again.
        cuda::Driver& driver = Cuda();
        const cuda::BufferUse host_scratch{host_scratch_, bytes, cuda::Use::ReadWrite};
        driver.HostAccess({&host_scratch, 1});
        std::memcpy(host_scratch_, values.data() + first, bytes);
        MLFW_CUDA_CHECK(driver.MemcpyAsync(scratch_, host_scratch_, bytes, cudaMemcpyHostToDevice, Stream()));
        // The values come back to the host: waited for (the event follows the copy back).
        Enqueue(
            "ncclAllReduce (host values)", true,
            [&](ncclComm_t comm) {
              const cuda::BufferUse scratch{scratch_, bytes, cuda::Use::ReadWrite};
              Collective("ncclAllReduce (host values)", Stream(), scratch, {}, [&] {
                return ncclAllReduce(scratch_, scratch_, count, ncclFloat64, NcclOp(op), comm, Stream());
              });
            },
            [&] {
              MLFW_CUDA_CHECK(driver.MemcpyAsync(host_scratch_, scratch_, bytes, cudaMemcpyDeviceToHost, Stream()));
            });
        driver.HostAccess({&host_scratch, 1});
        std::memcpy(values.data() + first, host_scratch_, bytes);
      }
    });
  }
  using IProcessGroup::AllReduceHost;

  // The non-blocking forms run on the communication stream (StartAsync, NcclRequest.hpp);
  // staged tensors and Blocking groups take the blocking calls (a completed request).
  CollectiveRequestPtr AllGatherAsync(const ITensor& input, ITensor& output) override {
    detail::CheckGatherSizes(input, output, world_size_);
    if (!Direct(input) || !Direct(output)) return IProcessGroup::AllGatherAsync(input, output);
    const DeviceOperand in(input, options_.Device, true);
    const DeviceOperand out(output, options_.Device, false);
    return StartAsync("AllGatherAsync", "ncclAllGather", [&](ncclComm_t comm) {
      Collective("ncclAllGather", comm_stream_, in.Read(input), out.Written(output), [&] {
        return ncclAllGather(in.Pointer(), out.Pointer(), input.Size(), NcclType(input.GetDataType()), comm,
                             comm_stream_);
      });
    });
  }

  CollectiveRequestPtr ReduceScatterAsync(const ITensor& input, ITensor& output, ReduceOp op) override {
    detail::CheckOp(op);
    detail::CheckScatterSizes(input, output, world_size_);
    if (!Direct(input) || !Direct(output)) return IProcessGroup::ReduceScatterAsync(input, output, op);
    const DeviceOperand in(input, options_.Device, true);
    const DeviceOperand out(output, options_.Device, false);
    return StartAsync("ReduceScatterAsync", "ncclReduceScatter", [&](ncclComm_t comm) {
      Collective("ncclReduceScatter", comm_stream_, in.Read(input), out.Written(output), [&] {
        return ncclReduceScatter(in.Pointer(), out.Pointer(), output.Size(), NcclType(input.GetDataType()), NcclOp(op),
                                 comm, comm_stream_);
      });
    });
  }

  CollectiveRequestPtr AllReduceAsync(ITensor& tensor, ReduceOp op) override {
    detail::CheckOp(op);
    detail::CheckCollectiveDType("AllReduce", tensor);
    if (!Direct(tensor)) return IProcessGroup::AllReduceAsync(tensor, op);
    const DeviceOperand data(tensor, options_.Device, true);
    return StartAsync("AllReduceAsync", "ncclAllReduce", [&](ncclComm_t comm) {
      Collective("ncclAllReduce", comm_stream_, data.Read(tensor), data.Written(tensor), [&] {
        return ncclAllReduce(data.Pointer(), data.Pointer(), tensor.Size(), NcclType(tensor.GetDataType()), NcclOp(op),
                             comm, comm_stream_);
      });
    });
  }

  std::shared_ptr<IProcessGroup> Split(int color, int key) override {
    detail::CheckSplitColor(color);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    ncclComm_t part = nullptr;
    Run("Split", [&] {
      // ncclCommSplit blocks until every rank joins: what was enqueued before finishes first,
      // so the watchdog has nothing pending (and no reason to abort the communicator) meanwhile.
      pending_->WaitAll("Split");
      {
        const std::lock_guard lock(comm_mutex_);
        if (aborted_) {
          throw CommunicationError("Split: the NCCL communicator of rank " + std::to_string(rank_) + " was aborted");
        }
      }
      MLFW_NCCL_CHECK(nccl_->CommSplit(comm_, color, key, &part));
    });
    int rank = 0;
    int size = 0;
    try {
      MLFW_NCCL_CHECK(nccl_->CommUserRank(part, &rank));
      MLFW_NCCL_CHECK(nccl_->CommCount(part, &size));
    } catch (...) {
      MLFW_NCCL_CHECK_NOTHROW(nccl_->CommDestroy(part));
      throw;
    }
    return std::make_shared<NcclProcessGroup>(part, rank, size, options_);  // owns `part`, even when it throws
#else
    static_cast<void>(key);
    throw BackendError("NcclProcessGroup::Split: this build's NCCL " + std::to_string(NCCL_MAJOR) + "." +
                       std::to_string(NCCL_MINOR) + " has no ncclCommSplit (NCCL 2.18 or later)");
#endif
  }

  void Abort(const std::string& message) noexcept override {
    std::fprintf(stderr, "mlframework: rank %d aborting: %s\n", rank_, message.c_str());
    std::fflush(stderr);
    AbortCommunicator();
    // The other ranks see the aborted peer as an NCCL error (their watchdog or next call) and throw.
    std::_Exit(EXIT_FAILURE);
  }

 private:
  static constexpr std::size_t kScratchDoubles = 4096;

  cudaStream_t Stream() const noexcept { return context_->Stream(); }
  cuda::Driver& Cuda() const noexcept { return context_->DeviceDriver(); }

  // One collective through the NCCL driver: @p call on @p stream, which reads @p read and
  // writes @p written.
  void Collective(const char* name, cudaStream_t stream, const cuda::BufferUse& read, const cuda::BufferUse& written,
                  const std::function<ncclResult_t()>& call) {
    const std::array<cuda::BufferUse, 2> buffers{read, written};
    const ncclResult_t result = nccl_->Collective(name, stream, buffers, call);
    if (result != ncclSuccess) {
      detail::ThrowNcclError(name, result, __FILE__, __LINE__);
    }
  }

  // A CUDA tensor on the group's device: usable in place by a collective on another stream.
  bool Direct(const ITensor& tensor) const {
    return !options_.Blocking && cuda::IsCudaTensor(tensor) && tensor.GetDevice() == Device::CUDA(options_.Device);
  }

  // Starts @p enqueue on the communication stream after the compute stream's work so far; the
  // watchdog tracks it as any pending collective.
  template <typename Fn>
  CollectiveRequestPtr StartAsync(const char* what, const char* call, Fn&& enqueue) {
    std::unique_ptr<detail::NcclRequest> request;
    Run(what, [&] {
      request = std::make_unique<detail::NcclRequest>(*context_, aborted_flag_);
      cuda::Driver& driver = Cuda();
      cudaEvent_t ready = events_.Acquire();
      // Waits capture the event's state when called, so it goes back to the pool at once.
      const cudaError_t recorded = driver.EventRecord(ready, Stream());
      const cudaError_t waited = recorded == cudaSuccess ? driver.StreamWaitEvent(comm_stream_, ready) : recorded;
      events_.Release(ready);
      MLFW_CUDA_CHECK(waited);
      EnqueueOn(comm_stream_, call, false, std::forward<Fn>(enqueue), [&] {
        MLFW_CUDA_CHECK(driver.EventRecord(request->Event(), comm_stream_));
        MLFW_CUDA_CHECK(driver.EventRecord(comm_tail_, comm_stream_));
      });
      if (!comm_tail_valid_) {
        // The operands may be freed (on the compute stream) before the request is waited for:
        // every free of this device waits for the communication stream's last collective.
        context_->OrderFreesAfter(comm_tail_);
      }
      comm_tail_valid_ = true;
    });
    return request;
  }

  // The rest of construction once comm_ is set: on failure the communicator is destroyed.
  void Start() {
    try {
      scratch_ = static_cast<double*>(context_->Allocate(kScratchDoubles * sizeof(double)));
      cuda::Driver& driver = Cuda();
      void* pinned = nullptr;
      MLFW_CUDA_CHECK(driver.MallocHost(&pinned, kScratchDoubles * sizeof(double)));
      host_scratch_ = static_cast<double*>(pinned);
      pending_ =
          std::make_unique<detail::PendingCollectives>(rank_, options_.TimeoutSeconds, kWatchdogInterval, MakeHooks());
      MLFW_CUDA_CHECK(driver.StreamCreate(&comm_stream_, cudaStreamNonBlocking));
      MLFW_CUDA_CHECK(driver.EventCreate(&comm_tail_));
    } catch (...) {
      cuda::Driver& driver = Cuda();
      if (comm_stream_ != nullptr) MLFW_CUDA_CHECK_NOTHROW(driver.StreamDestroy(comm_stream_));
      if (host_scratch_ != nullptr) MLFW_CUDA_CHECK_NOTHROW(driver.FreeHost(host_scratch_));
      context_->Free(scratch_);
      MLFW_NCCL_CHECK_NOTHROW(nccl_->CommDestroy(comm_));
      throw;
    }
  }

  // The blocking collective @p what from @p input into @p output on Stream(): @p nccl(send, recv,
  // comm) makes the NCCL call @p call over the operands' device memory (a staged copy for a
  // tensor elsewhere, written back to @p output once the call finished).
  template <typename Nccl>
  void InputToOutput(const char* what, const char* call, const ITensor& input, ITensor& output, Nccl&& nccl) {
    Run(what, [&] {
      const DeviceOperand in(input, options_.Device, true);
      const DeviceOperand out(output, options_.Device, false);
      Enqueue(call, in.Staged() || out.Staged(), [&](ncclComm_t comm) {
        Collective(call, Stream(), in.Read(input), out.Written(output),
                   [&] { return nccl(in.Pointer(), out.Pointer(), comm); });
      });
      out.Commit(output);
    });
  }

  // InputToOutput() in place on @p tensor: @p nccl(data, comm).
  template <typename Nccl>
  void InPlace(const char* what, const char* call, ITensor& tensor, Nccl&& nccl) {
    Run(what, [&] {
      const DeviceOperand data(tensor, options_.Device, true);
      Enqueue(call, data.Staged(), [&](ncclComm_t comm) {
        Collective(call, Stream(), data.Read(tensor), data.Written(tensor), [&] { return nccl(data.Pointer(), comm); });
      });
      data.Commit(tensor);
    });
  }

  // Runs one collective: first raises an earlier failure (found now or by the watchdog)
  // and retires finished work without blocking; a communication failure aborts the
  // communicator (it cannot be trusted afterwards) and propagates.
  template <typename Fn>
  void Run(const char* what, Fn&& fn) {
    cuda::DeviceGuard guard(options_.Device);
    const cuda::ExternalOrder order(options_.Device, Stream());  // the framework's stream, if any (StreamGuard)
    // While the framework's stream captures a CUDA graph (the library's stream joined it above),
    // the runtime forbids the check's event queries; what it would find is raised by the next
    // call outside the capture.
    if (!Capturing(Stream())) {
      pending_->Check(what);
    }
    try {
      // Collectives of one communicator run in the order they were started on every rank: a
      // collective on the compute stream waits for those started on the communication stream.
      if (comm_tail_valid_) MLFW_CUDA_CHECK(Cuda().StreamWaitEvent(Stream(), comm_tail_));
      fn();
    } catch (const CommunicationError& e) {
      pending_->Fail(e.what());
      throw;
    }
  }

  // Enqueues the NCCL call of @p enqueue on the backend stream under the communicator lock,
  // records an event and registers it with the watchdog, then runs @p after (stream work that
  // follows it, outside the lock; it must not block the host) and registers an event after that
  // too. Nothing can block before the watchdog knows the collective, so a dead peer ends in a
  // CommunicationError after the timeout. Stream order makes later kernels see the result, so
  // the host waits only when @p must_wait (the result goes to the host) or in Blocking mode.
  template <typename Fn>
  void Enqueue(const char* call, bool must_wait, Fn&& enqueue) {
    EnqueueOn(Stream(), call, must_wait, std::forward<Fn>(enqueue), NoFollowUp{});
  }
  template <typename Fn, typename After>
  void Enqueue(const char* call, bool must_wait, Fn&& enqueue, After&& after) {
    EnqueueOn(Stream(), call, must_wait, std::forward<Fn>(enqueue), std::forward<After>(after));
  }
  // Enqueue() on @p stream (the compute stream or the communication stream).
  template <typename Fn, typename After>
  void EnqueueOn(cudaStream_t stream, const char* call, bool must_wait, Fn&& enqueue, After&& after) {
    bool aborted = false;
    {
      const std::lock_guard lock(comm_mutex_);
      aborted = aborted_;
      if (!aborted) {
        enqueue(comm_);
      }
    }
    if (aborted) {
      // The watchdog aborted since this call's check: raise what it recorded (outside the
      // communicator lock, which the check's hooks take).
      pending_->Check(call);
      throw CommunicationError(std::string(call) + ": the NCCL communicator of rank " + std::to_string(rank_) +
                               " was aborted");
    }
    Track(stream, call);
    if constexpr (!std::is_same_v<std::decay_t<After>, NoFollowUp>) {
      after();
      Track(stream, call);
    }
    if (must_wait || options_.Blocking) {
      pending_->WaitAll(call);
    }
  }

  // Stream work to follow a collective: none.
  struct NoFollowUp {
    void operator()() const noexcept {}
  };

  // Whether @p stream is capturing work into a CUDA graph.
  bool Capturing(cudaStream_t stream) const {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    MLFW_CUDA_CHECK(Cuda().StreamIsCapturing(stream, &capture));
    return capture != cudaStreamCaptureStatusNone;
  }

  // Records an event on @p stream and registers it with the watchdog as @p call. Not while the
  // stream captures work into a CUDA graph (a framework's capture joined through a StreamGuard):
  // that work runs only when the graph is launched, and the runtime refuses to query an event
  // recorded during the capture (cudaErrorCapturedEvent), which would abort the communicator.
  // The replays of a captured collective are the framework's to wait for.
  void Track(cudaStream_t stream, const char* call) {
    if (Capturing(stream)) {
      return;
    }
    cudaEvent_t event = events_.Acquire();
    try {
      MLFW_CUDA_CHECK(Cuda().EventRecord(event, stream));
    } catch (...) {
      events_.Release(event);
      throw;
    }
    pending_->Add(
        call, [this, event] { return QueryEvent(event); }, [this, event] { events_.Release(event); });
  }

  // Runs on the owner's thread and on the watchdog's (whose device is set at its start).
  detail::CollectiveStatus QueryEvent(cudaEvent_t event) const {
    const cudaError_t status = Cuda().EventQuery(event);
    if (status == cudaSuccess) {
      return {detail::CollectiveStatus::State::Done, {}};
    }
    if (status == cudaErrorNotReady) {
      return {detail::CollectiveStatus::State::NotDone, {}};
    }
    static_cast<void>(cudaGetLastError());
    return {detail::CollectiveStatus::State::Failed,
            "cuda:" + std::to_string(options_.Device) + ": " +
                cuda::CudaErrorMessage("cudaEventQuery(event)", status, __FILE__, __LINE__)};
  }

  // The communicator's asynchronous error ("" while healthy); the watchdog calls it too.
  std::string AsyncError() {
    const std::lock_guard lock(comm_mutex_);
    if (aborted_) {
      return {};
    }
    ncclResult_t async = ncclSuccess;
    MLFW_NCCL_CHECK(nccl_->CommGetAsyncError(comm_, &async));
    if (async == ncclSuccess || async == ncclInProgress) {
      return {};
    }
    const char* last = nccl_->GetLastError(comm_);
    return std::string("asynchronous NCCL error: ") + ncclGetErrorString(async) +
           (last != nullptr && last[0] != '\0' ? " (" + std::string(last) + ")" : "");
  }

  detail::PendingCollectivesHooks MakeHooks() {
    detail::PendingCollectivesHooks hooks;
    hooks.AsyncError = [this] { return AsyncError(); };
    hooks.Abort = [this] { AbortCommunicator(); };
    // cudaEventQuery and cudaEventDestroy from the watchdog need the group's device, and
    // relaxed capture mode: its event queries must not invalidate a framework's capture (in
    // global mode) on another thread; it never queries an event recorded inside one (Track()).
    hooks.WatchdogStart = [this] {
      MLFW_CUDA_CHECK(Cuda().SetDevice(options_.Device));
      cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
      MLFW_CUDA_CHECK(Cuda().ThreadExchangeStreamCaptureMode(&relaxed));
    };
    return hooks;
  }

  // Makes kernels stuck in a collective return (so a host blocked in a CUDA call elsewhere
  // gets control back) and frees the communicator; at most once.
  void AbortCommunicator() noexcept {
    const std::lock_guard lock(comm_mutex_);
    if (comm_ != nullptr && !aborted_) {
      aborted_ = true;
      aborted_flag_->store(true, std::memory_order_release);  // the requests' outputs are not valid
      MLFW_NCCL_CHECK_NOTHROW(nccl_->CommAbort(comm_));
    }
  }

  int rank_;
  int world_size_;
  NcclProcessGroupOptions options_;
  cuda::DeviceContext* context_;
  detail::NcclDriver* nccl_;
  ncclComm_t comm_ = nullptr;
  double* scratch_ = nullptr;
  double* host_scratch_ = nullptr;  // pinned: AllReduceHost's copies never block the host
  EventPool events_;
  // Guards comm_ and aborted_: the watchdog calls ncclCommGetAsyncError and ncclCommAbort
  // (the only NCCL calls it makes) while the owner may be enqueueing.
  std::mutex comm_mutex_;
  bool aborted_ = false;
  // aborted_ for the requests, which may outlive the group.
  std::shared_ptr<std::atomic<bool>> aborted_flag_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<detail::PendingCollectives> pending_;
  cudaStream_t comm_stream_ = nullptr;  // the non-blocking collectives' stream
  cudaEvent_t comm_tail_ = nullptr;     // recorded after the last of them
  bool comm_tail_valid_ = false;
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
  MLFW_NCCL_CHECK(detail::ActiveNcclDriver().GetUniqueId(&nccl_id));
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
