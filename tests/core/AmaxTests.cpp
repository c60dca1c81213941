// The amax (headroom telemetry) outside the CPU kernels: tensors without a backend (host
// addressable or not, misaligned), the host scaling state, and HeadroomBits().
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Headroom.hpp>
#include <mlframework/core/HostScaling.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "NonFinite.hpp"
#include "core/UserTensor.hpp"

using namespace mlframework;
using mlframework::testing::Mode;
using mlframework::testing::UserTensor;
using mlfw_test::kInf;
using mlfw_test::kNaN;

namespace {

// The largest finite |x * factor| over @p values after rounding them into @p dtype.
float ExpectedAmax(const std::vector<float>& values, DataType dtype, float factor) {
  const std::vector<float> stored = FromVector(values, {values.size()}, dtype)->ToFloatVector();
  float amax = 0.0f;
  for (const float x : stored) {
    const float v = std::fabs(x * factor);
    if (std::isfinite(v)) amax = std::max(amax, v);
  }
  return amax;
}

bool SameBits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

struct AmaxRun {
  Mode mode;
  bool host;
  std::size_t misalign;
};
const AmaxRun kAmaxRuns[] = {{Mode::Defaults, true, 0},
                             {Mode::Overrides, true, 0},
                             {Mode::Defaults, false, 0},
                             {Mode::Overrides, false, 0},
                             {Mode::Defaults, true, 1}};

std::vector<float> AmaxInputs(std::size_t n, float scale, bool poison) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = scale * static_cast<float>((static_cast<int>(i * 37 % 101) - 50)) / 7.0f;
  }
  if (poison) {
    v[n / 2] = kInf;
    v[n / 3] = kNaN;
  }
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(Amax)

// Tensors without a backend, alone and mixed with CPU tensors: the same amax, flag and values as
// the CPU tensors holding the same elements.
BOOST_AUTO_TEST_CASE(UserTensorsMatchCpuTensors) {
  for (const AmaxRun& kind : kAmaxRuns) {
    for (const DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
      for (const bool poison : {false, true}) {
        const std::vector<float> a = AmaxInputs(1001, 3.0f, poison);
        const std::vector<float> b = AmaxInputs(37, 900.0f, false);
        std::vector<TensorPtr> user{std::make_shared<UserTensor>(a, dtype, kind.mode, kind.host, kind.misalign),
                                    FromVector(b, {b.size()}, dtype)};
        std::vector<TensorPtr> cpu{FromVector(a, {a.size()}, dtype), FromVector(b, {b.size()}, dtype)};
        const float factor = 0.125f;
        const float expected = std::max(ExpectedAmax(a, dtype, factor), ExpectedAmax(b, dtype, factor));
        BOOST_TEST_INFO("mode " << static_cast<int>(kind.mode) << " host " << kind.host << " misalign " << kind.misalign
                                << " dtype " << ToString(dtype) << " poison " << poison);
        const NonFiniteAndAmax checked = CheckAndAmax(user);
        BOOST_TEST(checked.FoundNonFinite == poison);
        BOOST_TEST(SameBits(checked.Amax, std::max(ExpectedAmax(a, dtype, 1.0f), ExpectedAmax(b, dtype, 1.0f))));

        std::vector<TensorPtr> dst{Zeros({a.size()}), Zeros({b.size()})};
        const NonFiniteAndAmax cast = CastIntoAndAmax(user, dst, factor);
        BOOST_TEST(cast.FoundNonFinite == poison);
        BOOST_TEST(SameBits(cast.Amax, expected));

        const NonFiniteAndAmax unscaled = UnscaleCheckAndAmax(user, factor);
        const NonFiniteAndAmax reference = UnscaleCheckAndAmax(cpu, factor);
        BOOST_TEST(unscaled.FoundNonFinite == poison);
        BOOST_TEST(reference.FoundNonFinite == poison);
        BOOST_TEST(SameBits(unscaled.Amax, expected));
        BOOST_TEST(SameBits(reference.Amax, expected));
        const std::vector<float> got = user[0]->ToFloatVector();
        const std::vector<float> want = cpu[0]->ToFloatVector();
        BOOST_TEST_REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          BOOST_TEST_INFO("element " << i);
          BOOST_TEST((SameBits(got[i], want[i]) || (std::isnan(got[i]) && std::isnan(want[i]))));
        }
      }
    }
  }
}

// The host state folds the amax of its unscale passes while tracking, and only then.
BOOST_AUTO_TEST_CASE(HostStateTracksTheUnscale) {
  const HostScalingBackend& scaling = HostScaling();
  const ScalePolicy policy{.InitialScale = 1024.0f};
  auto state = scaling.CreateScaleState(Device::CPU(), policy, ScaleState::Initial(policy));
  BOOST_TEST(!state->AmaxTracking());
  const std::vector<TensorPtr> grads{FromVector({2048.0f, -4096.0f, 1.0f}, {3})};
  WritePass(grads, {}, {.Op = WriteOp::Scale, .State = state.get()});
  BOOST_TEST(state->Amax() == 0.0f);  // off: the plain kernels, no amax

  state->SetAmaxTracking(true);
  const std::vector<TensorPtr> next{FromVector({2048.0f, -8192.0f, kInf}, {3})};
  WritePass(next, {}, {.Op = WriteOp::Scale, .State = state.get()});
  BOOST_TEST(state->FoundInf());
  BOOST_TEST(state->Amax() == 8.0f);  // 8192 / 1024; the Inf left out
  // A cast folds in with the maximum; a check does not fold (its gradients may be scaled).
  const std::vector<TensorPtr> src{FromVector({10240.0f}, {1}, DataType::Float16)};
  const std::vector<TensorPtr> dst{Zeros({1})};
  WritePass(src, dst, {.Op = WriteOp::Cast, .State = state.get()});
  BOOST_TEST(state->Amax() == 10.0f);
  const std::vector<TensorPtr> big{FromVector({1.0e30f}, {1})};
  ReadPass(big, {.State = state.get()});
  BOOST_TEST(state->Amax() == 10.0f);
  // The update leaves it; a clear, a write and switching tracking reset it.
  scaling.UpdateScale(*state);
  BOOST_TEST(state->Amax() == 10.0f);
  state->ClearAmax();
  BOOST_TEST(state->Amax() == 0.0f);
  WritePass(grads, {}, {.Op = WriteOp::Scale, .State = state.get()});
  BOOST_TEST(state->Amax() > 0.0f);
  state->Write(ScaleState::Initial(policy));
  BOOST_TEST(state->Amax() == 0.0f);
}

// With tracking, the flag tensor carries the amax, so one MAX all-reduce agrees both.
BOOST_AUTO_TEST_CASE(FlagTensorCarriesTheAmax) {
  const HostScalingBackend& scaling = HostScaling();
  const ScalePolicy policy{.InitialScale = 2.0f};
  auto state = scaling.CreateScaleState(Device::CPU(), policy, ScaleState::Initial(policy));
  TensorPtr flag;
  state->FlagToTensor(flag);
  BOOST_TEST(flag->Size() == 1u);
  state->SetAmaxTracking(true);
  const std::vector<TensorPtr> grads{FromVector({6.0f, -1.0f}, {2})};
  WritePass(grads, {}, {.Op = WriteOp::Scale, .State = state.get()});
  state->FlagToTensor(flag);
  BOOST_TEST_REQUIRE(flag->Size() == 2u);
  BOOST_TEST(flag->ToFloatVector() == std::vector<float>({0.0f, 3.0f}), boost::test_tools::per_element());
  const TensorPtr reduced = FromVector({1.0f, 5.0f}, {2});
  state->FlagFromTensor(*reduced);
  BOOST_TEST(state->FoundInf());
  BOOST_TEST(state->Amax() == 5.0f);
  // A one-element flag no longer fits: ArgumentError naming `in`, the state unchanged.
  const TensorPtr one = FromVector({0.0f}, {1});
  BOOST_CHECK_EXCEPTION(state->FlagFromTensor(*one), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "in"; });
  BOOST_TEST(state->FoundInf());
  BOOST_TEST(state->Amax() == 5.0f);
}

BOOST_AUTO_TEST_CASE(HeadroomBitsOfEachDtype) {
  // FP16: log2(65504 / (amax * scale)), as a difference of logarithms (within a few ulps).
  const auto near = [](double a, double b) { return std::fabs(a - b) < 1e-12; };
  BOOST_TEST(near(HeadroomBits(1.0f, 1024.0f, DataType::Float16), std::log2(65504.0 / 1024.0)));
  BOOST_TEST(near(HeadroomBits(0.5f, 65536.0f, DataType::Float16), std::log2(65504.0 / 32768.0)));
  BOOST_TEST(near(HeadroomBits(1.0f, 1.0f, DataType::Float32), std::log2(3.4028234663852886e38)));
  BOOST_TEST(near(HeadroomBits(1.0f, 1.0f, DataType::BFloat16), std::log2(0x1.fep127)));
  // Already past the maximum: negative; the product would overflow FP32 but the bits do not.
  BOOST_TEST(HeadroomBits(4.0f, 32768.0f, DataType::Float16) < 0.0);
  BOOST_TEST(std::isfinite(HeadroomBits(3.0e38f, 3.0e38f, DataType::Float32)));
  BOOST_TEST(std::isinf(HeadroomBits(0.0f, 8.0f, DataType::Float16)));
  BOOST_TEST(MaxFiniteValue(DataType::Float16) == 65504.0);
}

// Bad input: tests/reliability/AmaxBadInputTests.cpp.

BOOST_AUTO_TEST_SUITE_END()
