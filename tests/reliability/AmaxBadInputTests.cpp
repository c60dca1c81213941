// Bad input to the amax (headroom telemetry) entry points: the multi-tensor amax passes,
// HeadroomBits() and MaxFiniteValue(), a host state's flag tensor, and turning tracking on
// where the scaler cannot take it. Every case gets the documented exception naming the
// parameter, and nothing changes.
#include <limits>
#include <memory>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/amp/GradScaler.hpp>
#include <mlframework/core/Headroom.hpp>
#include <mlframework/core/HostScaling.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>

#include "NonFinite.hpp"
#include "reliability/BadInputSupport.hpp"

using namespace mlframework;
using mlframework::testing::ExpectError;
using mlframework::testing::Snapshot;
using mlfw_test::kInf;
using mlfw_test::kNaN;

namespace {

// A policy with only the six pure members of ILossScaler: it cannot track the amax.
class PlainScaler final : public amp::ILossScaler {
 public:
  float CurrentScale() const override { return 4.0f; }
  bool IsEnabled() const override { return true; }
  TensorPtr ScaleLoss(const TensorPtr& loss) override { return loss->Multiply(4.0f); }
  GradientMap UnscaleGradients(const GradientMap& gradients) override { return gradients; }
  bool CheckOverflow(const GradientMap& /*gradients*/) override { return false; }
  void UpdateScale(bool /*overflow*/) override {}
};

}  // namespace

BOOST_AUTO_TEST_SUITE(AmaxBadInput)

BOOST_AUTO_TEST_CASE(MultiTensorAmaxPassesRejectNullsAndMismatches) {
  const std::vector<TensorPtr> tensors{FromVector({1.0f, -2.0f}, {2}), FromVector({3.0f}, {1}, DataType::Float16),
                                       FromVector({4.0f, 5.0f, 6.0f}, {3})};
  const auto before = Snapshot(tensors);
  std::vector<TensorPtr> with_null = tensors;
  with_null.insert(with_null.begin() + 1, nullptr);
  ExpectError<ArgumentNullError>([&] { (void)UnscaleCheckAndAmax(with_null, 0.5f); }, "tensors[1]");
  ExpectError<ArgumentNullError>([&] { (void)CheckAndAmax(with_null); }, "tensors[1]");
  std::vector<TensorPtr> dst{Zeros({2}), Zeros({1}), Zeros({3})};
  const auto dst_before = Snapshot(dst);
  ExpectError<ArgumentNullError>([&] { (void)CastIntoAndAmax(with_null, dst); }, "src[1]");
  std::vector<TensorPtr> dst_with_null = dst;
  dst_with_null[2] = nullptr;
  ExpectError<ArgumentNullError>([&] { (void)CastIntoAndAmax(tensors, dst_with_null); }, "dst[2]");
  const std::vector<TensorPtr> short_dst(dst.begin(), dst.end() - 1);
  ExpectError<ArgumentError>([&] { (void)CastIntoAndAmax(tensors, short_dst); }, "dst");
  std::vector<TensorPtr> wrong_shape = dst;
  wrong_shape[2] = Zeros({1, 3});
  ExpectError<ArgumentError>([&] { (void)CastIntoAndAmax(tensors, wrong_shape, 2.0f); }, "dst[2]");
  BOOST_TEST(Snapshot(tensors) == before);
  BOOST_TEST(Snapshot(dst) == dst_before);
}

BOOST_AUTO_TEST_CASE(HeadroomRejectsBadValues) {
  for (const float amax : {-1.0f, kNaN, kInf, -kInf}) {
    ExpectError<ArgumentError>([&] { (void)HeadroomBits(amax, 2.0f, DataType::Float16); }, "amax");
  }
  for (const float scale : {0.0f, -2.0f, kNaN, kInf}) {
    ExpectError<ArgumentError>([&] { (void)HeadroomBits(1.0f, scale, DataType::Float16); }, "scale");
  }
  ExpectError<ArgumentError>([&] { (void)HeadroomBits(1.0f, 2.0f, static_cast<DataType>(9)); }, "gradient_dtype");
  ExpectError<ArgumentError>([&] { (void)MaxFiniteValue(static_cast<DataType>(9)); }, "dtype");
}

BOOST_AUTO_TEST_CASE(FlagTensorOfTheWrongSizeIsRefused) {
  const HostScalingBackend& scaling = HostScaling();
  const ScalePolicy policy{.InitialScale = 8.0f};
  auto state = scaling.CreateScaleState(Device::CPU(), policy, ScaleState::Initial(policy));
  state->SetAmaxTracking(true);
  const std::vector<TensorPtr> grads{FromVector({16.0f}, {1})};
  WritePass(grads, {}, {.Op = WriteOp::Scale, .State = state.get()});
  for (const TensorPtr& bad : {FromVector({1.0f}, {1}), FromVector({1.0f, 2.0f, 3.0f}, {3}),
                               FromVector({1.0f, 2.0f}, {2}, DataType::Float16)}) {
    ExpectError<ArgumentError>([&] { state->FlagFromTensor(*bad); }, "in");
    BOOST_TEST(!state->FoundInf());
    BOOST_TEST(state->Amax() == 2.0f);
  }
}

BOOST_AUTO_TEST_CASE(TrackingOnAScalerWithoutItIsRefused) {
  amp::GradScaler scaler(std::make_shared<PlainScaler>());
  const auto before = scaler.StateDict();
  ExpectError<InvalidOperationError>([&] { scaler.SetAmaxTracking(true); });
  BOOST_TEST(!scaler.AmaxTracking());
  BOOST_TEST(!scaler.LastAmax().has_value());
  BOOST_TEST((scaler.StateDict() == before));
}

BOOST_AUTO_TEST_SUITE_END()
