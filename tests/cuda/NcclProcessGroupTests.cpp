// The NCCL process group on one GPU (world size 1): every collective on every
// dtype, CUDA tensors in place and CPU tensors staged, and bad arguments.
// Needs a CUDA device (and a build with NCCL; otherwise the factories must
// throw BackendError). Multi-GPU runs need a machine with several GPUs.
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/config.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/NcclProcessGroup.hpp>

using namespace mlframework;
using namespace mlframework::distributed;

namespace {

const Device kGpu = Device::CUDA(0);
constexpr DataType kDtypes[] = {DataType::Float32, DataType::Float16, DataType::BFloat16};

std::shared_ptr<IProcessGroup> MakeGroup() {
  return MakeNcclProcessGroup(MakeNcclUniqueId(), 0, 1, NcclProcessGroupOptions{.Device = 0});
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
    }
  }
  std::vector<double> host = {1.5, -3.0, 1e300};
  group->AllReduceHost(host, ReduceOp::Sum);
  BOOST_TEST(host == (std::vector<double>{1.5, -3.0, 1e300}), boost::test_tools::per_element());
  BOOST_TEST(group->AllReduceHost(7.0, ReduceOp::Max) == 7.0);
  group->Barrier();
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

BOOST_AUTO_TEST_SUITE_END()
