#include <mlframework/distributed/LocalProcessGroup.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <mlframework/core/DataType.hpp>
#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/distributed/HostStaging.hpp"

namespace mlframework::distributed {

namespace {
void CopyElements(const ITensor& input, ITensor& output) {
  // Two tensors of one device backend (a GPU): one queued device copy, no host round trip.
  const TensorBackend* backend = input.Backend();
  if (backend != nullptr && backend == output.Backend() && !input.GetDevice().IsCPU() &&
      input.GetDevice() == output.GetDevice()) {
    // Non-owning (the aliasing constructor without an owner): the caller holds both tensors.
    const TensorPtr source(TensorPtr(), const_cast<ITensor*>(&input));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
    const TensorPtr target(TensorPtr(), &output);
    backend->Write({{&source, 1}, true}, {{&target, 1}, true}, {.Op = WriteOp::Cast});
    return;
  }
  detail::HostRead source(input);
  detail::HostWrite target(output, false);
  // The input may be the output itself or a view of it (FSDP gathers in place).
  if (target.Data() != source.Data()) {
    std::memmove(target.Data(), source.Data(), input.Size() * ElementSize(input.GetDataType()));
  }
  target.Commit();
}
}  // namespace

LocalProcessGroup::~LocalProcessGroup() = default;

int LocalProcessGroup::Rank() const noexcept { return 0; }
int LocalProcessGroup::WorldSize() const noexcept { return 1; }
std::string_view LocalProcessGroup::BackendName() const noexcept { return "local"; }

void LocalProcessGroup::AllGather(const ITensor& input, ITensor& output) {
  detail::CheckGatherSizes(input, output, 1);
  if (&input != &output) CopyElements(input, output);
}

void LocalProcessGroup::ReduceScatter(const ITensor& input, ITensor& output, ReduceOp op) {
  detail::CheckOp(op);
  detail::CheckScatterSizes(input, output, 1);
  if (&input != &output) CopyElements(input, output);
}

void LocalProcessGroup::AllReduce(ITensor& tensor, ReduceOp op) {
  detail::CheckOp(op);
  detail::CheckCollectiveDType("AllReduce", tensor);
}

void LocalProcessGroup::AllToAll(const ITensor& input, ITensor& output) {
  detail::CheckAllToAllSizes(input, output, 1);
  if (&input != &output) CopyElements(input, output);
}

void LocalProcessGroup::Broadcast(ITensor& tensor, int root) {
  detail::CheckRoot(root, 1);
  detail::CheckCollectiveDType("Broadcast", tensor);
}

void LocalProcessGroup::Barrier() {}

void LocalProcessGroup::AllReduceHost(std::span<double> /*values*/, ReduceOp op) { detail::CheckOp(op); }

std::shared_ptr<IProcessGroup> LocalProcessGroup::Split(int color, int /*key*/) {
  detail::CheckSplitColor(color);
  return std::make_shared<LocalProcessGroup>();
}

void LocalProcessGroup::Abort(const std::string& message) noexcept {
  std::fprintf(stderr, "mlframework: rank 0 aborting: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

std::shared_ptr<IProcessGroup> MakeLocalProcessGroup() { return std::make_shared<LocalProcessGroup>(); }

}  // namespace mlframework::distributed
