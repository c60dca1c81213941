// The non-blocking collectives of the MPI engine (see MpiAsync.hpp for the threading model).
//
// Results match the blocking calls bit for bit under the same options: the all-to-all
// reductions (the defaults) exchange the whole tensor with one MPI_Ialltoall(v) instead of
// 1 MiB steps and run the same local combine in rank order once it arrived; their receive
// buffer is therefore one reduce-sized copy of the input per reduction in flight. The other
// methods use MPI_Ireduce_scatter_block / MPI_Iallreduce with the same MPI_Op (for 16-bit
// sums the user op, which MPI allows in non-blocking collectives); there the bits equal the
// blocking call's whenever MPI's blocking and non-blocking algorithms sum in the same order
// (always on two ranks).
#include "mlframework/distributed/MpiAsync.hpp"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <functional>
#include <new>
#include <string>
#include <utility>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/HostConversion.hpp>

#include "mlframework/distributed/HostStaging.hpp"
#include "mlframework/distributed/MpiCheck.hpp"
#include "mlframework/distributed/MpiWait.hpp"

namespace mlframework::distributed::detail {

namespace {

bool AllToAll(const MpiProcessGroupOptions& options, DataType dtype, std::size_t total) {
  const bool chosen = dtype == DataType::Float32 ? options.Float32Sum == Float32Reduction::AllToAll
                                                 : options.HalfSum == HalfReduction::AllToAll;
  return chosen && total <= static_cast<std::size_t>(INT_MAX);
}

// Bytes of host memory for @p tensor, or null when it would need staging.
bool OnHost(const ITensor& tensor) { return tensor.Size() == 0 || !tensor.HostBytes().empty(); }

}  // namespace

std::mutex& MpiCallLock() noexcept {
  static std::mutex lock;
  return lock;
}

// One started operation: MPI requests in stages, each stage's local work in Advance().
class MpiAsyncOp {
 public:
  explicit MpiAsyncOp(const char* call) : call_(call) {}
  virtual ~MpiAsyncOp() = default;
  MpiAsyncOp(const MpiAsyncOp&) = delete;
  MpiAsyncOp& operator=(const MpiAsyncOp&) = delete;

  // Tests the current request and runs what follows it; true once complete (or failed). A
  // poll already running on another thread makes this one return at once.
  bool Poll(MpiAsyncEngine& engine) noexcept {
    if (done_.load()) return true;
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock() || done_.load()) return done_.load();
    if (error_) {  // failed earlier, still holding its place in the follow-up order
      if (Abandon(engine)) done_.store(true);
      return done_.load();
    }
    try {
      if (request_ != MPI_REQUEST_NULL) {
        int flag = 0;
        {
          const std::lock_guard mpi(MpiCallLock());
          Check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), call_);
        }
        if (flag == 0) return false;
      }
      if (Advance(engine)) done_.store(true);
    } catch (...) {
      error_ = std::current_exception();
      if (Abandon(engine)) done_.store(true);
    }
    return done_.load();
  }
  bool Done() const noexcept { return done_.load(); }
  void RethrowIfFailed() {
    const std::lock_guard lock(mutex_);
    if (error_) std::rethrow_exception(error_);
  }

 protected:
  // Runs once the current request completed (or, with none, when the op may move on): true
  // when the op is complete; false after starting the next request or to be called again.
  virtual bool Advance(MpiAsyncEngine& engine) = 0;
  // After a failure: passes the operation's place in the order of the follow-up starts once
  // every earlier place has passed (passed any sooner, it would stand for an earlier one and
  // leave that operation waiting forever), so the operations behind it still start theirs.
  // True once the operation holds no place; until then Poll() calls it again.
  virtual bool Abandon(MpiAsyncEngine& /*engine*/) noexcept { return true; }
  void Start(int code) const { Check(code, call_); }
  // The same for a start into the engine's @p scratch: a failed one gives it back first, so
  // that it leaves the engine as it was.
  void Start(int code, MpiAsyncEngine& engine, std::vector<std::byte>& scratch) const {
    if (code != MPI_SUCCESS) engine.GiveScratch(std::move(scratch));
    Start(code);
  }

  MPI_Request request_ = MPI_REQUEST_NULL;  // NOLINT(misc-non-private-member-variables-in-classes)

 private:
  const char* call_;
  std::mutex mutex_;  // one poller at a time
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
};

namespace {

class SingleOp final : public MpiAsyncOp {
 public:
  using MpiAsyncOp::MpiAsyncOp;
  MPI_Request* Request() noexcept { return &request_; }
  // Local work after the request (a narrowing, the caller's finish), if any.
  std::function<void()> after;

 private:
  bool Advance(MpiAsyncEngine& /*engine*/) override {
    if (after) after();
    after = nullptr;  // what it holds (the caller's tensors) goes before the op completes
    return true;
  }
};

// An operation's place in the order of the starts on the engine's second communicator
// (MpiAsyncEngine::TakeTicket()). A place taken is passed exactly once, in turn: by the start it
// was taken for or, after a failure, by Abandon(), so the operations behind it still start.
class FollowUpTurn {
 public:
  void Take(MpiAsyncEngine& engine) noexcept {
    ticket_ = engine.TakeTicket();
    held_ = true;
  }
  // True from Take() until Pass().
  bool Held() const noexcept { return held_; }
  // True once every earlier place has passed.
  bool Ready(const MpiAsyncEngine& engine) const noexcept { return engine.MayStart(ticket_); }
  void Pass(MpiAsyncEngine& engine) noexcept {
    if (held_) {
      held_ = false;
      engine.Started();
    }
  }
  // Passes the place once it is its turn (after a failure); true once none is held.
  bool PassInTurn(MpiAsyncEngine& engine) noexcept {
    if (held_ && !Ready(engine)) return false;
    Pass(engine);
    return true;
  }

 private:
  std::size_t ticket_ = 0;
  bool held_ = false;
};

// The all-to-all reduce-scatter: every rank's part of every rank arrives in `parts`, then the
// combine of the blocking call, then the caller's finish. With a finish (ReduceScatterAsyncThen)
// the MPI_Ialltoall itself starts on the polling thread too, as the deferred all-gathers do (on
// the second communicator, in the order the operations were started): its start copies this
// rank's own part, which the caller's thread then does not wait for.
class ScatterByAllToAll final : public MpiAsyncOp {
 public:
  ScatterByAllToAll(MpiAsyncEngine& engine, const void* send, void* recv, std::size_t count, DataType dtype,
                    ReduceOp op, std::function<void()> finish)
      : MpiAsyncOp("MPI_Ialltoall"),
        finish_(std::move(finish)),
        send_(send),
        recv_(recv),
        count_(count),
        dtype_(dtype),
        op_(op),
        world_(engine.WorldSize()) {}
  // Takes the receive buffer, then starts the all-to-all or, with a finish, takes the place in
  // the follow-up order. Throws having started nothing and taken no place.
  void Begin(MpiAsyncEngine& engine) {
    parts_ = engine.TakeScratch(count_ * static_cast<std::size_t>(world_) * ElementSize(dtype_));
    if (finish_) {
      turn_.Take(engine);
      return;
    }
    int code = MPI_SUCCESS;
    {
      const std::lock_guard mpi(MpiCallLock());
      code = StartOn(engine.Comm());
    }
    Start(code, engine, parts_);
  }

 private:
  int StartOn(MPI_Comm comm) {
    const int n = static_cast<int>(count_);
    return MPI_Ialltoall(send_, n, WireType(dtype_), parts_.data(), n, WireType(dtype_), comm, &request_);
  }
  bool Advance(MpiAsyncEngine& engine) override {
    if (turn_.Held()) {
      if (!turn_.Ready(engine)) return false;
      const std::lock_guard mpi(MpiCallLock());
      const int code = StartOn(engine.FollowUp());
      turn_.Pass(engine);
      Start(code);
      return false;
    }
    CombineParts(parts_.data(), world_, count_, dtype_, op_, recv_);
    engine.GiveScratch(std::move(parts_));
    if (finish_) finish_();
    finish_ = nullptr;  // what it holds (the caller's tensors) goes before the op completes
    return true;
  }
  bool Abandon(MpiAsyncEngine& engine) noexcept override { return turn_.PassInTurn(engine); }

  std::function<void()> finish_;
  const void* send_;
  void* recv_;
  std::size_t count_;
  DataType dtype_;
  ReduceOp op_;
  int world_;
  std::vector<std::byte> parts_;
  FollowUpTurn turn_;  // held when the all-to-all starts on the polling thread
};

// The all-to-all all-reduce: each rank combines its part (stage 1), then the parts are
// all-gathered (stage 2) on the engine's second communicator, in the order the operations
// were started, since stage 2 starts on whichever thread polls first.
class AllReduceByAllToAll final : public MpiAsyncOp {
 public:
  AllReduceByAllToAll(MpiAsyncEngine& engine, void* data, std::size_t count, DataType dtype, ReduceOp op)
      : MpiAsyncOp("MPI_Ialltoallv"), data_(static_cast<std::byte*>(data)), dtype_(dtype), op_(op) {
    const auto ranks = static_cast<std::size_t>(engine.WorldSize());
    const auto me = static_cast<std::size_t>(engine.Rank());
    const std::size_t part = (count + ranks - 1) / ranks;
    counts_.resize(ranks);
    displacements_.resize(ranks);
    for (std::size_t r = 0; r < ranks; ++r) {
      const std::size_t first = std::min(count, r * part);
      displacements_[r] = static_cast<int>(first);
      counts_[r] = static_cast<int>(std::min(count, first + part) - first);
    }
    mine_ = static_cast<std::size_t>(counts_[me]);
    offset_ = static_cast<std::size_t>(displacements_[me]);
    receive_counts_.assign(ranks, counts_[me]);
    receive_displacements_.resize(ranks);
    for (std::size_t r = 0; r < ranks; ++r) receive_displacements_[r] = static_cast<int>(r * mine_);
  }
  // Takes the receive buffer and starts the first stage. Throws having started nothing and
  // taken no place.
  void Begin(MpiAsyncEngine& engine) {
    parts_ = engine.TakeScratch(mine_ * static_cast<std::size_t>(engine.WorldSize()) * ElementSize(dtype_));
    int code = MPI_SUCCESS;
    {
      const std::lock_guard mpi(MpiCallLock());
      code = MPI_Ialltoallv(data_, counts_.data(), displacements_.data(), WireType(dtype_), parts_.data(),
                            receive_counts_.data(), receive_displacements_.data(), WireType(dtype_), engine.Comm(),
                            &request_);
    }
    Start(code, engine, parts_);
    // The place in the order of the second stages is taken only once the first stage started:
    // an operation whose start threw never polls, so it could not pass a place it held.
    turn_.Take(engine);
  }

 private:
  bool Advance(MpiAsyncEngine& engine) override {
    if (!combined_) {
      CombineParts(parts_.data(), engine.WorldSize(), mine_, dtype_, op_, data_ + offset_ * ElementSize(dtype_));
      engine.GiveScratch(std::move(parts_));
      combined_ = true;
    }
    if (turn_.Held()) {
      if (!turn_.Ready(engine)) return false;
      const std::lock_guard mpi(MpiCallLock());
      const int code = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data_, counts_.data(), displacements_.data(),
                                       WireType(dtype_), engine.FollowUp(), &request_);
      turn_.Pass(engine);
      Check(code, "MPI_Iallgatherv");
      return false;
    }
    return true;
  }
  bool Abandon(MpiAsyncEngine& engine) noexcept override { return turn_.PassInTurn(engine); }

  std::byte* data_;
  DataType dtype_;
  ReduceOp op_;
  std::vector<int> counts_, displacements_, receive_counts_, receive_displacements_;
  std::size_t mine_ = 0;
  std::size_t offset_ = 0;
  std::vector<std::byte> parts_;
  FollowUpTurn turn_;  // held until the all-gather starts
  bool combined_ = false;
};

// An all-gather whose send slot `prepare` writes first (FSDP's cast of its shard): both run on
// the thread that polls the operation, as a rule the progress thread, during the caller's
// compute. That thread's starts are not ordered with the callers' calls on the group's
// communicator, so the all-gather starts on the second one, in the order the operations were
// started (the same on every rank), as the all-reduces' second stages do.
class DeferredAllGather final : public MpiAsyncOp {
 public:
  DeferredAllGather(std::function<void()> prepare, const void* send, void* recv, int count, MPI_Datatype type)
      : MpiAsyncOp("MPI_Iallgather"),
        prepare_(std::move(prepare)),
        send_(send),
        recv_(recv),
        count_(count),
        type_(type) {}
  // Takes the place in the follow-up order (the all-gather starts when polled).
  void Begin(MpiAsyncEngine& engine) noexcept { turn_.Take(engine); }

 private:
  bool Advance(MpiAsyncEngine& engine) override {
    if (!turn_.Held()) return true;  // the all-gather completed
    if (!turn_.Ready(engine)) return false;
    prepare_();
    prepare_ = nullptr;  // what it holds (the caller's tensors) goes before the op completes
    const std::lock_guard mpi(MpiCallLock());
    const int code = MPI_Iallgather(send_, count_, type_, recv_, count_, type_, engine.FollowUp(), &request_);
    turn_.Pass(engine);
    Start(code);
    return false;
  }
  bool Abandon(MpiAsyncEngine& engine) noexcept override { return turn_.PassInTurn(engine); }

  std::function<void()> prepare_;
  const void* send_;  // MPI_IN_PLACE for a send slot inside the output
  void* recv_;
  int count_;
  MPI_Datatype type_;
  FollowUpTurn turn_;  // held until the all-gather starts
};

// Allocated before its operation starts (MpiAsyncEngine::Submit()), bound to it after.
class MpiRequest final : public CollectiveRequest {
 public:
  explicit MpiRequest(std::shared_ptr<MpiAsyncEngine> engine) : engine_(std::move(engine)) {}
  ~MpiRequest() override {
    if (!op_) return;  // its operation never started
    try {
      Wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the peers see the failure in their own requests
    }
  }
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;

  void Bind(std::shared_ptr<MpiAsyncOp> op) noexcept { op_ = std::move(op); }

  bool Test() override {
    if (!op_->Done()) engine_->ProgressAll();
    if (!op_->Done()) return false;
    op_->RethrowIfFailed();
    return true;
  }
  void Wait() override {
    engine_->WaitFor(*op_);
    op_->RethrowIfFailed();
  }

 private:
  std::shared_ptr<MpiAsyncEngine> engine_;
  std::shared_ptr<MpiAsyncOp> op_;
};

// MLFW_MPI_PROGRESS_THREAD=0 leaves progress to Test() and Wait() (and to the blocking calls).
bool ProgressThreadWanted() {
  const char* text = std::getenv("MLFW_MPI_PROGRESS_THREAD");
  return text == nullptr || std::string(text) != "0";
}

}  // namespace

MpiAsyncEngine::MpiAsyncEngine(MPI_Comm comm, MPI_Comm follow_up, int rank, int world_size,
                               MpiProcessGroupOptions options)
    : comm_(comm),
      follow_up_(follow_up),
      rank_(rank),
      world_size_(world_size),
      options_(options),
      kernel_threads_(omp_get_max_threads()),
      wait_(options.Wait.value_or(WaitMode::Spin)),
      use_thread_(ProgressThreadWanted()) {}

MpiAsyncEngine::~MpiAsyncEngine() { Shutdown(); }

void MpiAsyncEngine::Shutdown() noexcept {
  for (;;) {
    {
      const std::lock_guard lock(mutex_);
      if (active_.empty()) break;
    }
    ProgressAll();
    std::this_thread::yield();
  }
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MpiAsyncEngine::ProgressAll() {
  std::vector<std::shared_ptr<MpiAsyncOp>> ops;
  {
    const std::lock_guard lock(mutex_);
    ops.assign(active_.begin(), active_.end());
  }
  bool finished = false;
  for (const auto& op : ops) finished = op->Poll(*this) || finished;
  if (finished) {
    {
      const std::lock_guard lock(mutex_);
      active_.remove_if([](const std::shared_ptr<MpiAsyncOp>& op) { return op->Done(); });
    }
    finished_.notify_all();
  }
}

void MpiAsyncEngine::WaitFor(const MpiAsyncOp& op) {
  if (use_thread_) {
    // The progress thread drives every operation (second stages included): the waiting thread
    // sleeps rather than polling beside it, since on a rank with one core a second poller only
    // takes CPU time from the thread that moves the data and runs the combines. An op is marked
    // done before ProgressAll() takes mutex_ to notify, so the wake-up cannot be missed.
    std::unique_lock lock(mutex_);
    // Without a running thread (none started yet, or stopped) the caller polls, below.
    if (thread_.joinable() && !stop_) {
      finished_.wait(lock, [&op] { return op.Done(); });
      return;
    }
  }
  // Every outstanding operation is driven, not only this one: an earlier all-reduce may have to
  // start its second stage before this one may, and without the progress thread nothing else
  // would.
  while (!op.Done()) {
    ProgressAll();
    if (!op.Done()) std::this_thread::yield();
  }
}

bool MpiAsyncEngine::AwaitPeers() {
  if (wait_ == WaitMode::Spin || world_size_ == 1) return false;
  MPI_Request request = MPI_REQUEST_NULL;
  Check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  Check(WaitHeld(&request, wait_), "MPI_Test");
  return true;
}

std::vector<std::byte> MpiAsyncEngine::TakeScratch(std::size_t bytes) {
  {
    const std::lock_guard lock(mutex_);
    // The smallest kept buffer that fits.
    auto best = spare_.end();
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
      if (it->size() >= bytes && (best == spare_.end() || it->size() < best->size())) best = it;
    }
    if (best != spare_.end()) {
      std::vector<std::byte> buffer = std::move(*best);
      spare_.erase(best);
      return buffer;
    }
  }
  return std::vector<std::byte>(bytes);
}

void MpiAsyncEngine::GiveScratch(std::vector<std::byte> buffer) noexcept {
  const std::lock_guard lock(mutex_);
  if (spare_.size() < kSpareBuffers) {
    spare_.push_back(std::move(buffer));
    return;
  }
  // Full: keep the larger buffers.
  auto smallest =
      std::min_element(spare_.begin(), spare_.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
  if (smallest->size() < buffer.size()) *smallest = std::move(buffer);
}

void MpiAsyncEngine::Run() {
  // Yields in every wait mode, never sleeps: the thread runs only while operations are in
  // flight, and their fragments move only inside MPI calls on both sides (see MpiWait.hpp), so a
  // sleeping thread slowed the transfers it exists for.
  // Combines run here too: with the creating thread's kernel width, not OpenMP's default.
  omp_set_num_threads(kernel_threads_);
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !active_.empty(); });
    if (stop_) return;
    lock.unlock();
    try {
      ProgressAll();
    } catch (const std::bad_alloc&) {
      // Its copy of the operations in flight failed (memory is short), so nothing was polled:
      // poll again after the yield. Left to propagate, it would end the process.
    }
    std::this_thread::yield();
    lock.lock();
  }
}

// Once an operation started its MPI request or took its place in the follow-up order, the
// engine must own it: dropped, it would leave MPI writing into freed buffers and its place never
// passed, so every later follow-up start of the group would wait forever. Everything the
// hand-over needs (active_'s node, the caller's request) is therefore allocated before @p start
// runs, and the hand-over cannot fail. @p start throws having started nothing and taken no place,
// which leaves the engine as it was.
template <class StartFn>
CollectiveRequestPtr MpiAsyncEngine::Submit(std::shared_ptr<MpiAsyncOp> op, const StartFn& start) {
  std::list<std::shared_ptr<MpiAsyncOp>> node{op};
  auto request = std::make_unique<MpiRequest>(shared_from_this());
  start();
  request->Bind(std::move(op));
  Adopt(node);
  return request;
}

void MpiAsyncEngine::Adopt(std::list<std::shared_ptr<MpiAsyncOp>>& node) noexcept {
  {
    const std::lock_guard lock(mutex_);
    active_.splice(active_.end(), node);
    StartThread();
  }
  wake_.notify_one();
}

// A thread that fails to start (std::system_error when the system has none to spare,
// std::bad_alloc for its state) must not lose the operation already started: its caller's
// Test() and Wait() drive it instead, as with MLFW_MPI_PROGRESS_THREAD=0 (WaitFor() polls while
// no thread runs). The next Submit() tries again: a shortage of threads passes, and while it
// lasts a try costs one failed pthread_create per submitted operation.
void MpiAsyncEngine::StartThread() noexcept {
  if (!use_thread_ || thread_.joinable() || stop_) return;
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (...) {  // NOLINT(bugprone-empty-catch): the callers poll instead (above)
  }
}

CollectiveRequestPtr MpiAsyncEngine::AllGather(const ITensor& input, ITensor& output, std::function<void()> prepare) {
  CheckGatherSizes(input, output, world_size_);
  const int n = CountOf(input.Size(), "input");
  const MPI_Datatype type = WireType(input.GetDataType());
  const void* source = input.HostBytes().data();
  void* target = output.MutableHostBytes().data();
  const std::size_t slot_bytes = input.Size() * ElementSize(input.GetDataType());
  const auto* out_first = static_cast<const std::byte*>(target);
  const auto* in_first = static_cast<const std::byte*>(source);
  const bool in_place = n > 0 && in_first == out_first + slot_bytes * static_cast<std::size_t>(rank_);
  const auto* out_last = out_first + slot_bytes * static_cast<std::size_t>(world_size_);
  if (!in_place && n > 0 && in_first < out_last && out_first < in_first + slot_bytes) {
    throw ArgumentError("input", "AllGatherAsync: input overlaps the output other than exactly at this rank's slot");
  }
  if (prepare) {
    auto deferred =
        std::make_shared<DeferredAllGather>(std::move(prepare), in_place ? MPI_IN_PLACE : source, target, n, type);
    return Submit(deferred, [&] { deferred->Begin(*this); });
  }
  auto op = std::make_shared<SingleOp>("MPI_Iallgather");
  return Submit(op, [&] {
    const std::lock_guard mpi(MpiCallLock());
    Check(MPI_Iallgather(in_place ? MPI_IN_PLACE : source, n, type, target, n, type, comm_, op->Request()),
          "MPI_Iallgather");
  });
}

CollectiveRequestPtr MpiAsyncEngine::ReduceScatter(const ITensor& input, ITensor& output, ReduceOp op,
                                                   std::function<void()> finish) {
  CheckOp(op);
  CheckScatterSizes(input, output, world_size_);
  const std::size_t count = output.Size();
  const int n = CountOf(count, "output");
  const DataType dtype = input.GetDataType();
  const void* send = input.HostBytes().data();
  void* recv = output.MutableHostBytes().data();
  if (AllToAll(options_, dtype, count * static_cast<std::size_t>(world_size_))) {
    auto scatter = std::make_shared<ScatterByAllToAll>(*this, send, recv, count, dtype, op, std::move(finish));
    return Submit(scatter, [&] { scatter->Begin(*this); });
  }
  auto single = std::make_shared<SingleOp>("MPI_Ireduce_scatter_block");
  const bool half = dtype != DataType::Float32 && options_.HalfSum != HalfReduction::ConvertToFloat32;
  const void* wire_send = send;
  void* wire_recv = recv;
  if (dtype != DataType::Float32 && !half) {
    // Widen, reduce in FP32, narrow once (after completion).
    auto wide = std::make_shared<std::vector<float>>(count * static_cast<std::size_t>(world_size_));
    auto part = std::make_shared<std::vector<float>>(count);
    ConvertHostElements(send, dtype, wide->data(), DataType::Float32, wide->size());
    wire_send = wide->data();
    wire_recv = part->data();
    single->after = [wide, part, recv, dtype] {
      ConvertHostElements(part->data(), DataType::Float32, recv, dtype, part->size());
    };
  }
  if (finish) {
    single->after = [narrow = std::move(single->after), finish = std::move(finish)] {
      if (narrow) narrow();
      finish();
    };
  }
  return Submit(single, [&] {
    const std::lock_guard mpi(MpiCallLock());
    const MPI_Op reduce = half ? MpiHalfOp(dtype, op) : BuiltinOp(op);
    Check(MPI_Ireduce_scatter_block(wire_send, wire_recv, n, half ? MPI_UINT16_T : MPI_FLOAT, reduce, comm_,
                                    single->Request()),
          "MPI_Ireduce_scatter_block");
  });
}

CollectiveRequestPtr MpiAsyncEngine::AllReduce(ITensor& tensor, ReduceOp op) {
  CheckOp(op);
  CheckCollectiveDType("AllReduce", tensor);
  const std::size_t count = tensor.Size();
  const int n = CountOf(count, "tensor");
  const DataType dtype = tensor.GetDataType();
  void* data = tensor.MutableHostBytes().data();
  if (AllToAll(options_, dtype, count)) {
    auto reduce = std::make_shared<AllReduceByAllToAll>(*this, data, count, dtype, op);
    return Submit(reduce, [&] { reduce->Begin(*this); });
  }
  auto single = std::make_shared<SingleOp>("MPI_Iallreduce");
  const bool half = dtype != DataType::Float32 && options_.HalfSum != HalfReduction::ConvertToFloat32;
  void* wire = data;
  if (dtype != DataType::Float32 && !half) {
    // Widen, reduce in FP32, narrow once (after completion).
    auto wide = std::make_shared<std::vector<float>>(count);
    ConvertHostElements(data, dtype, wide->data(), DataType::Float32, count);
    wire = wide->data();
    single->after = [wide, data, dtype] {
      ConvertHostElements(wide->data(), DataType::Float32, data, dtype, wide->size());
    };
  }
  return Submit(single, [&] {
    const std::lock_guard mpi(MpiCallLock());
    const MPI_Op reduce = half ? MpiHalfOp(dtype, op) : BuiltinOp(op);
    Check(MPI_Iallreduce(MPI_IN_PLACE, wire, n, half ? MPI_UINT16_T : MPI_FLOAT, reduce, comm_, single->Request()),
          "MPI_Iallreduce");
  });
}

bool MpiAsyncEngine::Stageless(const ITensor& a, const ITensor& b) noexcept { return OnHost(a) && OnHost(b); }

}  // namespace mlframework::distributed::detail
