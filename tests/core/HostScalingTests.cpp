// The scaling interface on the host: the CPU backend and HostScaling() (user tensors) implement
// DeviceScalingBackend with a HostScaleState, and the front ends run their one code path on it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/core/DeviceScaling.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/HostScaling.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/optimizers/mixed_precision/DynamicLossScaler.hpp>

#include "NonFinite.hpp"

using namespace mlframework;
using mlfw_test::kInf;

namespace {

// A user's tensor: FP32 values in host memory, no TensorBackend (the per-tensor virtuals only).
class FloatUserTensor final : public ITensor {
 public:
  explicit FloatUserTensor(std::vector<float> values) : values_(std::move(values)), shape_{values_.size()} {}
  DataType GetDataType() const override { return DataType::Float32; }
  Device GetDevice() const override { return Device::CPU(); }
  const Shape& GetShape() const override { return shape_; }
  std::size_t Size() const override { return values_.size(); }
  std::vector<float> ToFloatVector() const override { return values_; }
  void CopyFromFloats(std::span<const float> values) override { values_.assign(values.begin(), values.end()); }

 private:
  std::vector<float> values_;
  Shape shape_;
};

const ScalePolicy kPolicy{.InitialScale = 4.0f, .GrowthInterval = 3};

}  // namespace

BOOST_AUTO_TEST_SUITE(HostScaling)

BOOST_AUTO_TEST_CASE(CpuBackendImplementsTheInterfaceWithAHostState) {
  const TensorPtr cpu = FromVector({2.0f, 8.0f}, {2});
  const DeviceScalingBackend& backend = ScalingOf(*cpu);
  BOOST_TEST(&backend == dynamic_cast<const DeviceScalingBackend*>(cpu->Backend()));
  BOOST_TEST(DeviceScalingOf(*cpu) == nullptr);  // no device memory: the host path's costs
  const std::unique_ptr<DeviceScaleState> state =
      backend.CreateScaleState(Device::CPU(), kPolicy, ScaleState::Initial(kPolicy));
  BOOST_TEST(state->GetDevice() == Device::CPU());
  BOOST_TEST(dynamic_cast<const HostScaleState*>(state.get()) != nullptr);  // its states live in host memory

  const TensorPtr list[] = {cpu};
  WritePass(list, {}, {.Op = WriteOp::Scale, .State = state.get()});
  BOOST_TEST(cpu->ToFloatVector() == (std::vector<float>{0.5f, 2.0f}));
  BOOST_TEST(!state->FoundInf());
  const TensorPtr half = FromVector({8.0f, kInf}, {2}, DataType::Float16);
  const TensorPtr wide = Zeros({2});
  const TensorPtr src[] = {half};
  const TensorPtr dst[] = {wide};
  WritePass(src, dst, {.Op = WriteOp::Cast, .State = state.get()});
  BOOST_TEST(wide->ToFloatVector()[0] == 2.0f);
  BOOST_TEST(state->FoundInf());

  // The flag as a tensor and back (the FSDP agreement), then the update from it.
  TensorPtr flag;
  state->FlagToTensor(flag);
  BOOST_TEST(flag->ToFloatVector() == (std::vector<float>{1.0f}));
  BOOST_CHECK_EXCEPTION(state->FlagFromTensor(*Zeros({2})), ArgumentError,
                        [](const ArgumentError& e) { return e.Parameter() == "in"; });
  BOOST_TEST(state->FoundInf());  // unchanged by the rejected call
  backend.UpdateScale(*state);
  BOOST_TEST(state->LastStepSkipped());
  BOOST_TEST(!state->FoundInf());
  BOOST_TEST(state->Read().Scale == 2.0f);
  BOOST_TEST(state->Read().TotalOverflows == 1);
}

BOOST_AUTO_TEST_CASE(UserTensorsGetTheGenericHostScaling) {
  const TensorPtr user = std::make_shared<FloatUserTensor>(std::vector<float>{4.0f, 12.0f});
  BOOST_TEST(&ScalingOf(*user) == &mlframework::HostScaling());
  HostScaleState state(kPolicy, ScaleState::Initial(kPolicy));
  const TensorPtr list[] = {user};
  WritePass(list, {}, {.Op = WriteOp::Scale, .State = &state});
  BOOST_TEST(user->ToFloatVector() == (std::vector<float>{1.0f, 3.0f}));
  BOOST_TEST(!state.FoundInf());
  const TensorPtr bad = std::make_shared<FloatUserTensor>(std::vector<float>{1.0f, kInf});
  const TensorPtr bad_list[] = {bad};
  ReadPass(bad_list, {.State = &state});
  BOOST_TEST(state.FoundInf());
  const TensorPtr loss[] = {user->Clone()};
  WritePass(loss, {}, {.Op = WriteOp::Scale, .State = &state, .FactorOfState = StateFactor::Scale});
  BOOST_TEST(loss[0]->ToFloatVector() == (std::vector<float>{4.0f, 12.0f}));
}

// A pass with a state reports into the state, so it takes no Check, Amax or Add; the backends'
// own kernels never take a host state (core runs its pass). Every refusal leaves all as it was.
BOOST_AUTO_TEST_CASE(PassesWithAStateRefuseWhatTheyCannotDo) {
  HostScaleState state(kPolicy, ScaleState::Initial(kPolicy));
  const TensorPtr grad = FromVector({8.0f, kInf}, {2});
  const TensorPtr out = Zeros({2});
  const TensorPtr list[] = {grad};
  const TensorPtr outs[] = {out};
  const auto names_options = [](const ArgumentError& e) { return e.Parameter() == "options"; };
  BOOST_CHECK_EXCEPTION(WritePass(list, {}, {.Check = true, .State = &state}), ArgumentError, names_options);
  BOOST_CHECK_EXCEPTION(WritePass(list, {}, {.Amax = true, .State = &state}), ArgumentError, names_options);
  BOOST_CHECK_EXCEPTION(WritePass(list, outs, {.Op = WriteOp::Add, .State = &state}), ArgumentError, names_options);
  BOOST_CHECK_EXCEPTION(WritePass(list, {}, {.State = &state, .FactorOfState = static_cast<StateFactor>(7)}),
                        ArgumentError, names_options);
  BOOST_CHECK_EXCEPTION(ReadPass(list, {.SumOfSquares = true, .State = &state}), ArgumentError, names_options);
  BOOST_CHECK_EXCEPTION(ReadPass(list, {.Amax = true, .State = &state}), ArgumentError, names_options);
  const TensorBackend& cpu = *grad->Backend();
  BOOST_CHECK_EXCEPTION((void)cpu.Write({list, true}, {}, {.State = &state}), ArgumentError, names_options);
  BOOST_CHECK_EXCEPTION((void)cpu.Read({list, true}, {.State = &state}), ArgumentError, names_options);
  BOOST_TEST(grad->ToFloatVector()[0] == 8.0f);
  BOOST_TEST(out->ToFloatVector()[0] == 0.0f);
  BOOST_TEST(!state.FoundInf());
  BOOST_TEST(state.Read().Scale == 4.0f);
  // The same pass without the refused option: the unscale by 1/4 records the Inf.
  WritePass(list, {}, {.State = &state});
  BOOST_TEST(grad->ToFloatVector()[0] == 2.0f);
  BOOST_TEST(state.FoundInf());
}

BOOST_AUTO_TEST_CASE(AScalerTakesCpuAndUserTensorsInOneList) {
  amp::DynamicLossScaler scaler({.InitialScale = 2.0f, .GrowthInterval = 100});
  const GradientMap grads = {{"cpu", FromVector({2.0f, 4.0f}, {2})},
                             {"user", std::make_shared<FloatUserTensor>(std::vector<float>{6.0f})}};
  const GradientMap unscaled = scaler.UnscaleAndRecordOverflow(grads);
  BOOST_TEST(unscaled.at("cpu")->ToFloatVector() == (std::vector<float>{1.0f, 2.0f}));
  BOOST_TEST(unscaled.at("user")->ToFloatVector() == (std::vector<float>{3.0f}));
  BOOST_TEST(!scaler.RecordedOverflow());
  BOOST_TEST(scaler.DeviceState() == nullptr);
  const GradientMap bad = {{"cpu", FromVector({1.0f}, {1})},
                           {"user", std::make_shared<FloatUserTensor>(std::vector<float>{kInf})}};
  BOOST_TEST(scaler.CheckOverflow(bad));
  BOOST_TEST(!scaler.RecordedOverflow());  // CheckOverflow returns its own result only
  scaler.RecordOverflow(bad);
  scaler.UpdateScaleFromRecord();
  BOOST_TEST(scaler.State().TotalOverflows == 1);
  BOOST_TEST(scaler.CurrentScale() == 1.0f);
}

BOOST_AUTO_TEST_CASE(MixedPrecisionCheckOverflowKeepsTheRecord) {
  optimizers::mixed_precision::DynamicLossScaler scaler;
  const GradientMap bad = {{"g", FromVector({kInf}, {1})}};
  const GradientMap good = {{"g", FromVector({1.0f}, {1})}};
  scaler.RecordOverflow(bad);
  BOOST_TEST(!scaler.CheckOverflow(good));
  scaler.UpdateScaleFromRecord();  // still consumes the overflow recorded before the check
  BOOST_TEST(scaler.TotalOverflows() == 1);
}

BOOST_AUTO_TEST_SUITE_END()
