// Device-resident dynamic scaling (DeviceScaling.hpp) on the CUDA backend:
// the scale trajectory computed on the device equals amp::UpdateScaleState run
// on the host over the same overflow sequence, and the unscaled gradients equal
// the CPU backend's. Needs a CUDA device.
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/ScalePolicy.hpp>
#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "cuda/CudaTestUtil.hpp"

using namespace mlframework;
using mlfw_cuda_test::Bits;
using mlfw_cuda_test::kGpu;
namespace cuda = mlframework::backends::cuda;

BOOST_AUTO_TEST_SUITE(CudaDeviceScaling)

BOOST_AUTO_TEST_CASE(BackendOfCudaTensorsHasTheExtension) {
  const TensorPtr gpu = Zeros({4}, DataType::Float16, kGpu);
  BOOST_TEST(DeviceScalingOf(*gpu) == &cuda::Backend());
  BOOST_TEST(gpu->Backend()->Name() == "cuda");
}

BOOST_AUTO_TEST_CASE(TrajectoryMatchesHostPolicyAndGradientsMatchCpu) {
  const amp::ScalePolicy policy{.InitialScale = 1024.0f,
                                .GrowthFactor = 2.0f,
                                .BackoffFactor = 0.5f,
                                .GrowthInterval = 3,
                                .MinScale = 1.0f,
                                .MaxScale = 4096.0f,
                                .Hysteresis = 2};
  amp::ValidateScalePolicy(policy);
  const DeviceScalingBackend& backend = cuda::Backend();
  auto state = backend.CreateScaleState(kGpu, policy, amp::ScaleState::Initial(policy));
  BOOST_TEST(state->GetDevice() == kGpu);
  BOOST_TEST((state->Read() == amp::ScaleState::Initial(policy)));

  amp::ScaleState host = amp::ScaleState::Initial(policy);
  // Overflow pattern: clean runs that grow to the maximum, and overflow runs that test hysteresis.
  const bool pattern[] = {false, false, false, true,  true, false, false, false, false, false,
                          false, false, true,  false, true, true,  true,  false, false, false};
  for (const bool overflow : pattern) {
    std::vector<float> values = {1.0f, -2.0f, 0.5f, 3.0f};
    if (overflow) {
      values[2] = std::numeric_limits<float>::infinity();
    }
    std::vector<TensorPtr> gpu_grads = {FromVector(values, {4}, DataType::Float16, kGpu),
                                        FromVector({7.0f, 8.0f}, {2}, DataType::BFloat16, kGpu)};
    std::vector<TensorPtr> cpu_grads = {FromVector(values, {4}, DataType::Float16),
                                        FromVector({7.0f, 8.0f}, {2}, DataType::BFloat16)};
    // Scale a loss by the device-resident scale.
    std::vector<TensorPtr> loss = {Scalar(0.75f, DataType::Float32, kGpu)};
    (void)backend.Write({loss, true}, {}, {.State = state.get(), .FactorOfState = StateFactor::Scale});
    BOOST_TEST(loss[0]->ToFloatVector()[0] == 0.75f * host.Scale);

    (void)backend.Write({gpu_grads, true}, {}, {.State = state.get()});
    const bool cpu_found = UnscaleAndCheck(cpu_grads, InverseScale(host.Scale));
    BOOST_TEST(state->FoundInf() == cpu_found);
    BOOST_TEST(cpu_found == overflow);
    for (std::size_t i = 0; i < cpu_grads.size(); ++i) {
      BOOST_TEST(Bits(*cpu_grads[i]) == Bits(*gpu_grads[i]), boost::test_tools::per_element());
    }
    backend.UpdateScale(*state);
    const bool skipped = amp::UpdateScaleState(host, policy, cpu_found);
    BOOST_TEST(state->LastStepSkipped() == skipped);
    BOOST_TEST(!state->FoundInf());  // cleared by the update
    BOOST_TEST((state->Read() == host));
  }
  BOOST_TEST(host.TotalOverflows == 6);
}

BOOST_AUTO_TEST_CASE(FlagRoundTripsThroughADeviceTensor) {
  const amp::ScalePolicy policy{.InitialScale = 1024.0f};
  const DeviceScalingBackend& backend = cuda::Backend();
  auto state = backend.CreateScaleState(kGpu, policy, amp::ScaleState::Initial(policy));
  TensorPtr flag;
  state->FlagToTensor(flag);
  BOOST_TEST_REQUIRE(flag != nullptr);
  BOOST_TEST(flag->GetDevice() == kGpu);
  BOOST_TEST((flag->GetDataType() == DataType::Float32));
  BOOST_TEST(flag->ToFloatVector() == std::vector<float>{0.0f}, boost::test_tools::per_element());
  const ITensor* first = flag.get();
  state->MarkFoundInf();
  state->FlagToTensor(flag);
  BOOST_TEST(flag.get() == first);  // reused
  BOOST_TEST(flag->ToFloatVector() == std::vector<float>{1.0f}, boost::test_tools::per_element());
  state->ClearFoundInf();
  BOOST_TEST(!state->FoundInf());
  state->FlagFromTensor(*flag);
  BOOST_TEST(state->FoundInf());
  flag->CopyFromFloats(std::vector<float>{0.0f});
  state->FlagFromTensor(*flag);
  BOOST_TEST(!state->FoundInf());
  BOOST_CHECK_THROW(state->FlagFromTensor(*Zeros({2}, DataType::Float32, kGpu)), ArgumentError);
  BOOST_CHECK_THROW(state->FlagFromTensor(*Zeros({1}, DataType::Float32)), ArgumentError);
}

BOOST_AUTO_TEST_CASE(CastUnscaledCheckAndMarkAccumulateIntoTheFlag) {
  const amp::ScalePolicy policy{.InitialScale = 65536.0f};
  const DeviceScalingBackend& backend = cuda::Backend();
  auto state = backend.CreateScaleState(kGpu, policy, amp::ScaleState::Initial(policy));

  const std::vector<float> values = {65536.0f, -131072.0f, 32.0f};
  std::vector<TensorPtr> src = {FromVector(values, {3}, DataType::Float16, kGpu)};
  std::vector<TensorPtr> dst = {Zeros({3}, DataType::Float32, kGpu)};
  std::vector<TensorPtr> cpu_src = {FromVector(values, {3}, DataType::Float16)};
  std::vector<TensorPtr> cpu_dst = {Zeros({3}, DataType::Float32)};
  (void)backend.Write({src, true}, {dst, true}, {.Op = WriteOp::Cast, .State = state.get()});
  CastInto(cpu_src, cpu_dst, InverseScale(65536.0f));
  BOOST_TEST(Bits(*dst[0]) == Bits(*cpu_dst[0]), boost::test_tools::per_element());
  // 65536 and -131072 overflow FP16 to +-Inf on the way in, and Inf / 65536 is written as Inf.
  BOOST_TEST(src[0]->HasInf());
  BOOST_TEST(state->FoundInf());

  state->ClearFoundInf();
  (void)backend.Read({src, true}, {.State = state.get()});
  BOOST_TEST(state->FoundInf());
  backend.UpdateScale(*state);
  BOOST_TEST(state->LastStepSkipped());
  BOOST_TEST(state->Read().Scale == 32768.0f);

  state->MarkFoundInf();
  backend.UpdateScale(*state);
  BOOST_TEST(state->LastStepSkipped());
  BOOST_TEST(state->Read().Scale == 16384.0f);

  amp::ScaleState loaded = amp::ScaleState::Initial(policy);
  loaded.Scale = 8.0f;
  loaded.TotalSteps = 41;
  state->Write(loaded);
  BOOST_TEST((state->Read() == loaded));
  BOOST_TEST(!state->FoundInf());
}

BOOST_AUTO_TEST_CASE(TensorsOnAnotherDeviceOrBackendAreRejected) {
  const DeviceScalingBackend& backend = cuda::Backend();
  auto state = backend.CreateScaleState(kGpu, amp::ScalePolicy{}, amp::ScaleState{});
  std::vector<TensorPtr> cpu = {Zeros({2})};
  BOOST_CHECK_EXCEPTION(backend.Write({cpu, true}, {}, {.State = state.get()}), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "tensors[0]"; });
  std::vector<TensorPtr> src = {Zeros({2}, DataType::Float16, kGpu)};
  std::vector<TensorPtr> dst = {Zeros({3}, DataType::Float32, kGpu)};
  BOOST_CHECK_THROW(backend.Write({src, true}, {dst, true}, {.Op = WriteOp::Cast, .State = state.get()}),
                    ArgumentError);
  BOOST_CHECK_THROW(backend.CreateScaleState(Device::CUDA(cuda::DeviceCount()), amp::ScalePolicy{}, amp::ScaleState{}),
                    BackendError);
}

BOOST_AUTO_TEST_SUITE_END()
