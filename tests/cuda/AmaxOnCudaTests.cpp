// The amax (headroom telemetry) on the CUDA backend: the fused kernels' amax equals the CPU
// backend's bit for bit (a maximum), with Inf and NaN left out, through the spans and through a
// device-resident scaling state (its amax and its two-element flag tensor). Needs a CUDA device.
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "cuda/CudaTestUtil.hpp"

using namespace mlframework;
using mlfw_cuda_test::kDtypes;
using mlfw_cuda_test::kGpu;

namespace {

// Values of every magnitude, with @p poison (0: none) at a few places.
std::vector<float> Values(std::size_t n, float poison) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(static_cast<int>(i * 7919 % 2001) - 1000) * 0.37f;
  }
  if (poison != 0.0f) {
    v[0] = poison;
    v[n / 2] = poison;
  }
  return v;
}

bool SameBits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaAmax)

BOOST_AUTO_TEST_CASE(KernelsMatchTheCpuBackend) {
  for (const DataType dtype : kDtypes) {
    for (const float poison : {0.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      BOOST_TEST_CONTEXT(ToString(dtype) << " poison " << poison) {
        const std::vector<float> a = Values(100003, poison);
        const std::vector<float> b = Values(17, 0.0f);
        const std::vector<TensorPtr> cpu{FromVector(a, {a.size()}, dtype), FromVector(b, {b.size()}, dtype)};
        const std::vector<TensorPtr> gpu{FromVector(a, {a.size()}, dtype, kGpu),
                                         FromVector(b, {b.size()}, dtype, kGpu)};
        const NonFiniteAndAmax checked = CheckAndAmax(gpu);
        const NonFiniteAndAmax checked_cpu = CheckAndAmax(cpu);
        BOOST_TEST(checked.FoundNonFinite == checked_cpu.FoundNonFinite);
        BOOST_TEST(SameBits(checked.Amax, checked_cpu.Amax));
        const NonFiniteAndAmax unscaled = UnscaleCheckAndAmax(gpu, 0.125f);
        const NonFiniteAndAmax unscaled_cpu = UnscaleCheckAndAmax(cpu, 0.125f);
        BOOST_TEST(unscaled.FoundNonFinite == (poison != 0.0f));
        BOOST_TEST(unscaled.FoundNonFinite == unscaled_cpu.FoundNonFinite);
        BOOST_TEST(SameBits(unscaled.Amax, unscaled_cpu.Amax));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(DeviceStateTracksTheUnscale) {
  const DeviceScalingBackend& scaling = *DeviceScalingOf(*Zeros({1}, DataType::Float32, kGpu));
  const ScalePolicy policy{.InitialScale = 1024.0f};
  auto state = scaling.CreateScaleState(kGpu, policy, ScaleState::Initial(policy));
  state->SetAmaxTracking(true);
  const std::vector<TensorPtr> grads{
      FromVector({2048.0f, -8192.0f, std::numeric_limits<float>::infinity()}, {3}, DataType::Float32, kGpu)};
  WritePass(grads, {}, {.Op = WriteOp::Scale, .State = state.get()});
  const std::vector<TensorPtr> src{FromVector({10240.0f}, {1}, DataType::Float16, kGpu)};
  const std::vector<TensorPtr> dst{Zeros({1}, DataType::Float32, kGpu)};
  WritePass(src, dst, {.Op = WriteOp::Cast, .State = state.get()});
  BOOST_TEST(state->FoundInf());
  BOOST_TEST(state->Amax() == 10.0f);
  TensorPtr flag;
  state->FlagToTensor(flag);
  BOOST_TEST_REQUIRE(flag->Size() == 2u);
  BOOST_TEST(flag->ToFloatVector() == std::vector<float>({1.0f, 10.0f}), boost::test_tools::per_element());
  const TensorPtr reduced = FromVector({0.0f, 12.0f}, {2}, DataType::Float32, kGpu);
  state->FlagFromTensor(*reduced);
  BOOST_TEST(!state->FoundInf());
  BOOST_TEST(state->Amax() == 12.0f);
  state->ClearAmax();
  BOOST_TEST(state->Amax() == 0.0f);
}

BOOST_AUTO_TEST_SUITE_END()
