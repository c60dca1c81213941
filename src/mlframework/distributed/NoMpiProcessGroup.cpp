// Build without MPI: the class exists (the header is the same in every build) and its
// constructor says clearly why it cannot work.
#include <mlframework/distributed/MpiProcessGroup.hpp>

#include <cstdlib>
#include <functional>

#include <mlframework/core/Error.hpp>

namespace mlframework::distributed {

struct MpiProcessGroup::Impl {
  MpiProcessGroupOptions options;
};

namespace {
[[noreturn]] void NoMpi() {
  throw BackendError(
      "MpiProcessGroup: this mlframework was built without MPI (MLFW_HAS_MPI is 0); "
      "install libopenmpi-dev and reconfigure, or use LocalProcessGroup");
}
}  // namespace

MpiProcessGroup::MpiProcessGroup(MpiProcessGroupOptions /*options*/) { NoMpi(); }
MpiProcessGroup::~MpiProcessGroup() = default;
int MpiProcessGroup::Rank() const noexcept { return 0; }
int MpiProcessGroup::WorldSize() const noexcept { return 1; }
std::string_view MpiProcessGroup::BackendName() const noexcept { return "mpi"; }
const MpiProcessGroupOptions& MpiProcessGroup::Options() const noexcept { return impl_->options; }
void MpiProcessGroup::AllGather(const ITensor&, ITensor&) { NoMpi(); }
void MpiProcessGroup::ReduceScatter(const ITensor&, ITensor&, ReduceOp) { NoMpi(); }
void MpiProcessGroup::AllReduce(ITensor&, ReduceOp) { NoMpi(); }
void MpiProcessGroup::AllToAll(const ITensor&, ITensor&) { NoMpi(); }
void MpiProcessGroup::Broadcast(ITensor&, int) { NoMpi(); }
CollectiveRequestPtr MpiProcessGroup::AllGatherAsync(const ITensor&, ITensor&) { NoMpi(); }
CollectiveRequestPtr MpiProcessGroup::ReduceScatterAsync(const ITensor&, ITensor&, ReduceOp) { NoMpi(); }
CollectiveRequestPtr MpiProcessGroup::AllReduceAsync(ITensor&, ReduceOp) { NoMpi(); }
CollectiveRequestPtr MpiProcessGroup::AllGatherAsyncAfter(std::function<void()>, const ITensor&, ITensor&) { NoMpi(); }
CollectiveRequestPtr MpiProcessGroup::ReduceScatterAsyncThen(const ITensor&, ITensor&, ReduceOp,
                                                             std::function<void()>) {
  NoMpi();
}
void MpiProcessGroup::Barrier() { NoMpi(); }
void MpiProcessGroup::AllReduceHost(std::span<double>, ReduceOp) { NoMpi(); }
std::shared_ptr<IProcessGroup> MpiProcessGroup::Split(int, int) { NoMpi(); }
void MpiProcessGroup::Abort(const std::string&) noexcept { std::abort(); }
bool MpiAvailable() noexcept { return false; }
std::shared_ptr<IProcessGroup> MakeMpiProcessGroup(MpiProcessGroupOptions options) {
  return std::make_shared<MpiProcessGroup>(options);
}

}  // namespace mlframework::distributed
