// The NCCL process group on one GPU (world size 1): every collective on every
// dtype, CUDA tensors in place and CPU tensors staged, bad arguments, collectives
// that return without waiting (ordered on the stream) and the Blocking option.
// Needs a CUDA device (and a build with NCCL; otherwise the factories must
// throw BackendError). Multi-GPU runs need a machine with several GPUs.
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/config.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/NcclProcessGroup.hpp>

#include "cuda/CudaTestUtil.hpp"

using namespace mlframework;
using namespace mlframework::distributed;
using mlfw_cuda_test::kDtypes;
using mlfw_cuda_test::kGpu;

namespace {

std::shared_ptr<IProcessGroup> MakeGroup(bool blocking = false) {
  return MakeNcclProcessGroup(MakeNcclUniqueId(), 0, 1, NcclProcessGroupOptions{.Device = 0, .Blocking = blocking});
}

// Multiples of 1/8 in [-2, 2): times 2^k they stay exact in FP16 and BF16.
std::vector<float> Eighths(std::size_t count) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = static_cast<float>(static_cast<int>(i % 32) - 16) / 8.0f;
  }
  return values;
}

// Enqueues @p rounds of AllGather, a backend kernel (x2), ReduceScatter, AllReduce and
// Broadcast, each reading what the one before wrote, with no host read in between; then
// reads the result (which synchronises) and checks it is values x 2^rounds.
void ChainedCollectives(IProcessGroup& group, DataType dtype, int rounds) {
  constexpr std::size_t kCount = 1u << 16;
  const std::vector<float> values = Eighths(kCount);
  const TensorPtr x = FromVector(values, {kCount}, dtype, kGpu);
  const TensorPtr gathered = Zeros({kCount}, dtype, kGpu);
  const TensorPtr scattered = Zeros({kCount}, dtype, kGpu);
  for (int round = 0; round < rounds; ++round) {
    group.AllGather(*x, *gathered);
    ScaleInPlace(std::vector<TensorPtr>{gathered}, 2.0f);
    group.ReduceScatter(*gathered, *scattered, ReduceOp::Sum);
    group.AllReduce(*scattered, ReduceOp::Max);
    group.Broadcast(*scattered, 0);
    CopyInto(std::vector<TensorPtr>{scattered}, std::vector<TensorPtr>{x});
  }
  std::vector<float> expected = values;
  for (float& value : expected) {
    value *= static_cast<float>(1 << rounds);
  }
  BOOST_TEST(x->ToFloatVector() == expected, boost::test_tools::per_element());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(NcclProcessGroupSingleRank)

BOOST_AUTO_TEST_CASE(FactoriesMatchTheBuild) {
  BOOST_TEST(NcclAvailable() == (MLFW_HAS_NCCL == 1));
  if (!NcclAvailable()) {
    BOOST_CHECK_THROW(MakeNcclUniqueId(), BackendError);
    return;
  }
  BOOST_CHECK_THROW(MakeNcclProcessGroup(NcclUniqueId{}, 1, 1), ArgumentError);
  BOOST_CHECK_THROW(MakeNcclProcessGroup(NcclUniqueId{}, 0, 0), ArgumentError);
  BOOST_CHECK_THROW(MakeNcclProcessGroup(NcclUniqueId{}, 0, 1, {.Device = 0, .TimeoutSeconds = -1.0}), ArgumentError);
  BOOST_CHECK_THROW(MakeNcclProcessGroup(NcclUniqueId{}, 0, 1, {.Device = backends::cuda::DeviceCount()}),
                    BackendError);
}

BOOST_AUTO_TEST_CASE(CollectivesOnEveryDtype) {
  if (!NcclAvailable()) {
    return;
  }
  const auto group = MakeGroup();
  BOOST_TEST(group->Rank() == 0);
  BOOST_TEST(group->WorldSize() == 1);
  BOOST_TEST(group->BackendName() == "nccl");
  const std::vector<float> values = {1.0f, -2.5f, 0.125f, 1024.0f};
  for (const DataType dtype : kDtypes) {
    for (const Device device : {kGpu, Device::CPU()}) {
      const TensorPtr input = FromVector(values, {4}, dtype, device);
      const TensorPtr output = Zeros({4}, dtype, device);
      group->AllGather(*input, *output);
      BOOST_TEST(output->ToFloatVector() == values, boost::test_tools::per_element());
      const TensorPtr scattered = Zeros({4}, dtype, device);
      group->ReduceScatter(*input, *scattered, ReduceOp::Sum);
      BOOST_TEST(scattered->ToFloatVector() == values, boost::test_tools::per_element());
      group->AllReduce(*input, ReduceOp::Max);
      group->AllReduce(*input, ReduceOp::Sum);
      BOOST_TEST(input->ToFloatVector() == values, boost::test_tools::per_element());
      group->Broadcast(*input, 0);
      BOOST_TEST(input->ToFloatVector() == values, boost::test_tools::per_element());
      const TensorPtr exchanged = Zeros({4}, dtype, device);
      group->AllToAll(*input, *exchanged);  // one rank: its one chunk comes back through ncclSend/ncclRecv
      BOOST_TEST(exchanged->ToFloatVector() == values, boost::test_tools::per_element());
    }
  }
  // The FP8 gradient wire's codes: bytes, on the device and staged.
  for (const Device device : {kGpu, Device::CPU()}) {
    const std::vector<float> codes = {1.0f, -2.5f, 0.125f, 448.0f};
    const TensorPtr input = FromVector(codes, {4}, DataType::Float8E4M3FN, device);
    const TensorPtr exchanged = Zeros({4}, DataType::Float8E4M3FN, device);
    group->AllToAll(*input, *exchanged);
    BOOST_TEST(exchanged->ToFloatVector() == codes, boost::test_tools::per_element());
  }
  std::vector<double> host = {1.5, -3.0, 1e300};
  group->AllReduceHost(host, ReduceOp::Sum);
  BOOST_TEST(host == (std::vector<double>{1.5, -3.0, 1e300}), boost::test_tools::per_element());
  BOOST_TEST(group->AllReduceHost(7.0, ReduceOp::Max) == 7.0);
  group->Barrier();
}

// The non-blocking forms run on the group's communication stream: chained with kernels on the
// compute stream and with blocking collectives, with no host read in between, the results are
// those of the blocking chain (stream events order the two streams).
BOOST_AUTO_TEST_CASE(AsyncCollectivesOrderedAgainstTheComputeStream) {
  if (!NcclAvailable()) {
    return;
  }
  const auto group = MakeGroup();
  constexpr std::size_t kCount = 1u << 16;
  for (const DataType dtype : kDtypes) {
    const std::vector<float> values = Eighths(kCount);
    const TensorPtr x = FromVector(values, {kCount}, dtype, kGpu);
    const TensorPtr gathered = Zeros({kCount}, dtype, kGpu);
    const TensorPtr scattered = Zeros({kCount}, dtype, kGpu);
    for (int round = 0; round < 3; ++round) {
      group->AllGatherAsync(*x, *gathered)->Wait();
      ScaleInPlace(std::vector<TensorPtr>{gathered}, 2.0f);
      auto reduce = group->ReduceScatterAsync(*gathered, *scattered, ReduceOp::Sum);
      BOOST_TEST_REQUIRE(reduce != nullptr);
      reduce->Wait();
      group->AllReduce(*scattered, ReduceOp::Max);               // blocking, after the async one started before it
      group->AllReduceAsync(*scattered, ReduceOp::Sum).reset();  // destroyed: completes in stream order
      CopyInto(std::vector<TensorPtr>{scattered}, std::vector<TensorPtr>{x});
    }
    std::vector<float> expected = values;
    for (float& value : expected) value *= 8.0f;
    BOOST_TEST(x->ToFloatVector() == expected, boost::test_tools::per_element());
    // CPU tensors are staged: the blocking path and a completed request.
    const TensorPtr host = FromVector(values, {kCount}, dtype, Device::CPU());
    auto staged = group->AllReduceAsync(*host, ReduceOp::Sum);
    BOOST_TEST(staged->Test());
    BOOST_TEST(host->ToFloatVector() == values, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(BadArgumentsThrowBeforeCommunicating) {
  if (!NcclAvailable()) {
    return;
  }
  const auto group = MakeGroup();
  const TensorPtr a = Zeros({4}, DataType::Float16, kGpu);
  const TensorPtr b = Zeros({3}, DataType::Float16, kGpu);
  const TensorPtr c = Zeros({4}, DataType::Float32, kGpu);
  BOOST_CHECK_THROW(group->AllGather(*a, *b), ArgumentError);
  BOOST_CHECK_THROW(group->AllGather(*a, *c), ArgumentError);
  BOOST_CHECK_THROW(group->ReduceScatter(*a, *b), ArgumentError);
  BOOST_CHECK_THROW(group->Broadcast(*a, 1), ArgumentError);
  group->Barrier();  // still usable
}

BOOST_AUTO_TEST_CASE(SplitFormsAnIndependentGroup) {
  if (!NcclAvailable()) {
    return;
  }
  const auto group = MakeGroup();
  BOOST_CHECK_THROW(group->Split(-1, 0), ArgumentError);
  const auto part = group->Split(0, 0);  // ncclCommSplit: a communicator of its own
  BOOST_REQUIRE(part != nullptr);
  BOOST_TEST(part.get() != group.get());
  BOOST_TEST(part->BackendName() == "nccl");
  BOOST_TEST(part->Rank() == 0);
  BOOST_TEST(part->WorldSize() == 1);
  const std::vector<float> values = {1.0f, -2.5f, 0.125f, 1024.0f};
  const TensorPtr tensor = FromVector(values, {4}, DataType::BFloat16, kGpu);
  part->AllReduce(*tensor, ReduceOp::Sum);
  group->AllReduce(*tensor, ReduceOp::Sum);
  BOOST_TEST(tensor->ToFloatVector() == values, boost::test_tools::per_element());
  BOOST_TEST(part->AllReduceHost(3.0, ReduceOp::Max) == 3.0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(NcclCollectivesWithoutWaiting)

BOOST_AUTO_TEST_CASE(EnqueuedCollectivesAreOrderedOnTheStream) {
  if (!NcclAvailable()) {
    return;
  }
  const auto group = MakeGroup();
  for (const DataType dtype : kDtypes) {
    ChainedCollectives(*group, dtype, 6);
  }
  // A waiting collective after the enqueued ones retires them and still works.
  std::vector<double> host = {2.0, -1.0};
  group->AllReduceHost(host, ReduceOp::Sum);
  BOOST_TEST(host == (std::vector<double>{2.0, -1.0}), boost::test_tools::per_element());
  group->Barrier();
}

BOOST_AUTO_TEST_CASE(StagedTensorsBetweenEnqueuedCollectives) {
  if (!NcclAvailable()) {
    return;
  }
  const auto group = MakeGroup();
  const std::vector<float> values = Eighths(1024);
  const TensorPtr device = FromVector(values, {1024}, DataType::Float16, kGpu);
  const TensorPtr host = FromVector(values, {1024}, DataType::Float16, Device::CPU());
  group->AllReduce(*device, ReduceOp::Sum);  // returns once enqueued
  group->AllReduce(*host, ReduceOp::Sum);    // staged: waits, then writes the CPU tensor
  BOOST_TEST(host->ToFloatVector() == values, boost::test_tools::per_element());
  group->Broadcast(*device, 0);
  BOOST_TEST(device->ToFloatVector() == values, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(GroupDestroyedWithWorkPending) {
  if (!NcclAvailable()) {
    return;
  }
  const std::vector<float> values = Eighths(1u << 20);
  const TensorPtr x = FromVector(values, {values.size()}, DataType::BFloat16, kGpu);
  {
    const auto group = MakeGroup();
    for (int i = 0; i < 16; ++i) {
      group->AllReduce(*x, ReduceOp::Max);
    }
  }  // the destructor lets the pending collectives finish before destroying the communicator
  BOOST_TEST(x->ToFloatVector() == values, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(BlockingOptionWaitsAndStillWorks) {
  if (!NcclAvailable()) {
    return;
  }
  const auto group = MakeGroup(true);
  for (const DataType dtype : kDtypes) {
    ChainedCollectives(*group, dtype, 3);
  }
  const std::vector<float> values = {1.0f, -2.5f, 0.125f, 1024.0f};
  const TensorPtr input = FromVector(values, {4}, DataType::Float32, Device::CPU());
  const TensorPtr output = Zeros({4}, DataType::Float32, Device::CPU());
  group->AllGather(*input, *output);
  BOOST_TEST(output->ToFloatVector() == values, boost::test_tools::per_element());
  BOOST_TEST(group->AllReduceHost(3.0, ReduceOp::Sum) == 3.0);
  group->Barrier();
}

BOOST_AUTO_TEST_SUITE_END()
