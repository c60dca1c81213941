// DelayedScaling's scales on recorded amax sequences, bit for bit against the rule computed
// here, and its amax history layout (Transformer Engine's roll).
#include <boost/test/unit_test.hpp>

#include <cfloat>
#include <cmath>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Float8ScaleUpdate.hpp>
#include <mlframework/core/TensorBackend.hpp>
#include <mlframework/fp8/DelayedScaling.hpp>

#include "NonFinite.hpp"
#include "amp/FakeDeviceBackend.hpp"
#include "fp8/RecipeTestUtil.hpp"

using namespace mlframework;
using namespace mlframework::fp8;
using mlfw_test::Bits;
using mlfw_test::kInf;
using mlfw_test::kNaN;
using mlfw_test::ValueOf;

namespace {

// Amax sequences with the cases the rule singles out: zero, Inf, NaN, a subnormal amax whose
// quotient overflows to FLT_MAX, and ordinary values up and down.
std::vector<float> ForwardAmaxes() {
  return {1.5f, 3.0f, 0.0f, 2.25f, kInf, 0.75f, kNaN, 100.0f, 1e-40f, 7.0f, 0.001f, 6.5f, 6.5f, 0.0f, 12.0f};
}
std::vector<float> GradientAmaxes() {
  return {0.0f, 1e-3f, 5e-4f, kNaN, 2e-3f, 4.0f, kInf, 1e-5f, 3e-5f, 0.0f, 65504.0f, 1.0f, 2.0f, 3.0f, 0.5f};
}

void CheckRecipe(std::size_t history, AmaxComputeAlgorithm algo, int margin, const TensorPtr& like) {
  DelayedScaling recipe(
      {.Margin = margin, .Fp8Format = Format::HYBRID, .AmaxHistoryLen = history, .AmaxComputeAlgo = algo});
  recipe.Register("w", TensorRole::Forward, *like);
  recipe.Register("dy", TensorRole::Gradient, *like);
  const bool most_recent = algo == AmaxComputeAlgorithm::MostRecent;
  mlfw_test::ReferenceDelayed w{history, most_recent, margin, 448.0f, {}, 1.0f};
  mlfw_test::ReferenceDelayed dy{history, most_recent, margin, 57344.0f, {}, 1.0f};
  const auto fwd = ForwardAmaxes();
  const auto grad = GradientAmaxes();
  for (std::size_t step = 0; step < fwd.size(); ++step) {
    mlfw_test::RecordAmax(recipe, "w", fwd[step]);
    mlfw_test::RecordAmax(recipe, "dy", grad[step]);
    recipe.UpdateScales();
    w.Step(fwd[step]);
    dy.Step(grad[step]);
    BOOST_TEST_CONTEXT("H " << history << " algo " << ToString(algo) << " margin " << margin << " step " << step) {
      BOOST_TEST(Bits(ValueOf(recipe.Scale("w"))) == Bits(w.scale));
      BOOST_TEST(Bits(ValueOf(recipe.Scale("dy"))) == Bits(dy.scale));
      BOOST_TEST(Bits(ValueOf(recipe.ScaleInv("w"))) == Bits(1.0f / w.scale));
      BOOST_TEST(Bits(ValueOf(recipe.ScaleInv("dy"))) == Bits(1.0f / dy.scale));
      BOOST_TEST(ValueOf(recipe.Amax("w")) == 0.0f);  // the slot of the next step's amax
    }
  }
}

// A host backend whose scale update fails on demand (a device whose call fails): its tensors
// wrap CPU tensors and expose their memory.
class FailingUpdateBackend final : public TensorBackend {
 public:
  std::string_view Name() const noexcept override { return "failing-update"; }
  TensorPtr Allocate(const Shape& shape, DataType dtype, Device device) const override;
  TensorPtr View(const TensorPtr& base, std::size_t offset, const Shape& shape) const override;
  void UpdateFloat8Scales(ITensor& state, const Float8ScaleUpdate& update) const override {
    if (fail) throw InvalidOperationError("failing-update: the scale update failed");
    TensorBackend::UpdateFloat8Scales(state, update);
  }
  mutable bool fail = false;
  mutable bool fail_writes = false;  // CopyFromFloats() of its tensors throws
};

const FailingUpdateBackend kFailing;

class FailingUpdateTensor final : public ITensor {
 public:
  explicit FailingUpdateTensor(TensorPtr inner) : inner_(std::move(inner)) {}
  DataType GetDataType() const override { return inner_->GetDataType(); }
  Device GetDevice() const override { return Device::CPU(); }
  const Shape& GetShape() const override { return inner_->GetShape(); }
  std::size_t Size() const override { return inner_->Size(); }
  std::vector<float> ToFloatVector() const override { return inner_->ToFloatVector(); }
  void CopyFromFloats(std::span<const float> values) override {
    if (kFailing.fail_writes) throw InvalidOperationError("failing-update: the write failed");
    inner_->CopyFromFloats(values);
  }
  const TensorBackend* Backend() const noexcept override { return &kFailing; }
  std::span<std::byte> HostStorage() const noexcept override {
    const std::span<const std::byte> bytes = inner_->HostBytes();
    return {const_cast<std::byte*>(bytes.data()), bytes.size()};
  }
  const TensorPtr& Inner() const { return inner_; }

 private:
  TensorPtr inner_;
};

TensorPtr FailingUpdateBackend::Allocate(const Shape& shape, DataType dtype, Device /*device*/) const {
  return std::make_shared<FailingUpdateTensor>(Zeros(shape, dtype));
}

TensorPtr FailingUpdateBackend::View(const TensorPtr& base, std::size_t offset, const Shape& shape) const {
  const auto& inner = dynamic_cast<const FailingUpdateTensor&>(*base).Inner();
  return std::make_shared<FailingUpdateTensor>(mlframework::backends::cpu::View(inner, offset, shape));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(DelayedScalingRule)

BOOST_AUTO_TEST_CASE(ScalesMatchTheFormulaOnRecordedAmaxSequences) {
  const TensorPtr like = Zeros({4});
  for (const std::size_t history : {std::size_t{1}, std::size_t{4}, std::size_t{16}}) {
    for (const auto algo : {AmaxComputeAlgorithm::Max, AmaxComputeAlgorithm::MostRecent}) {
      for (const int margin : {0, 1, 3}) CheckRecipe(history, algo, margin, like);
    }
  }
}

BOOST_AUTO_TEST_CASE(TheFakeDeviceTakesTheSameScales) {
  // A tensor without host bytes: the state lives on its (fake) device and the update runs
  // through the backend's default, a copy to the host and back.
  const TensorPtr like = std::make_shared<mlfw_test::FakeDeviceTensor>(Zeros({4}), 0);
  CheckRecipe(4, AmaxComputeAlgorithm::Max, 1, like);
  DelayedScaling recipe;
  recipe.Register("w", TensorRole::Forward, *like);
  BOOST_TEST(recipe.Scale("w")->GetDevice() == Device::CUDA(0));
  BOOST_TEST(recipe.Scale("w")->Backend() == like->Backend());
}

BOOST_AUTO_TEST_CASE(FirstScalesAreOneAndZeroAmaxKeepsThem) {
  DelayedScaling recipe;
  recipe.Register("w", TensorRole::Forward, *Zeros({1}));
  BOOST_TEST(ValueOf(recipe.Scale("w")) == 1.0f);
  BOOST_TEST(ValueOf(recipe.ScaleInv("w")) == 1.0f);
  recipe.UpdateScales();  // nothing recorded: amax 0
  BOOST_TEST(ValueOf(recipe.Scale("w")) == 1.0f);
  mlfw_test::RecordAmax(recipe, "w", 2.0f);
  recipe.UpdateScales();
  BOOST_TEST(ValueOf(recipe.Scale("w")) == 224.0f);
  BOOST_TEST(ValueOf(recipe.ScaleInv("w")) == 1.0f / 224.0f);
}

BOOST_AUTO_TEST_CASE(TinyAmaxClampsTheScaleToFloatMax) {
  DelayedScaling recipe({.AmaxHistoryLen = 1});
  recipe.Register("w", TensorRole::Forward, *Zeros({1}));
  mlfw_test::RecordAmax(recipe, "w", 1e-42f);
  recipe.UpdateScales();
  BOOST_TEST(ValueOf(recipe.Scale("w")) == FLT_MAX);
  BOOST_TEST(std::isfinite(ValueOf(recipe.ScaleInv("w"))));
}

BOOST_AUTO_TEST_CASE(HistoryRollsAsTransformerEngineRollsIt) {
  // TE's amax_and_scale_update: history[i] = history[i + 1], history[H-1] = the step's amax,
  // history[0] = 0 for the next step.
  DelayedScaling recipe({.AmaxHistoryLen = 3});
  recipe.Register("w", TensorRole::Forward, *Zeros({1}));
  mlfw_test::RecordAmax(recipe, "w", 1.0f);
  BOOST_TEST((recipe.AmaxHistory("w") == std::vector<float>{1.0f, 0.0f, 0.0f}));
  recipe.UpdateScales();
  BOOST_TEST((recipe.AmaxHistory("w") == std::vector<float>{0.0f, 0.0f, 1.0f}));
  mlfw_test::RecordAmax(recipe, "w", 2.0f);
  recipe.UpdateScales();
  BOOST_TEST((recipe.AmaxHistory("w") == std::vector<float>{0.0f, 1.0f, 2.0f}));
  mlfw_test::RecordAmax(recipe, "w", 3.0f);
  recipe.UpdateScales();
  BOOST_TEST((recipe.AmaxHistory("w") == std::vector<float>{0.0f, 2.0f, 3.0f}));
  // max over {3, 1, 2}: 448 / 3.
  BOOST_TEST(Bits(ValueOf(recipe.Scale("w"))) == Bits(448.0f / 3.0f));
}

BOOST_AUTO_TEST_CASE(FormatsPickTheTypesAndMaxima) {
  DelayedScaling hybrid({.Fp8Format = Format::HYBRID});
  DelayedScaling e4m3({.Fp8Format = Format::E4M3});
  for (DelayedScaling* recipe : {&hybrid, &e4m3}) {
    recipe->Register("x", TensorRole::Forward, *Zeros({1}));
    recipe->Register("g", TensorRole::Gradient, *Zeros({1}));
    mlfw_test::RecordAmax(*recipe, "g", 1.0f);
    recipe->UpdateScales();
  }
  BOOST_TEST((hybrid.Float8TypeOf("x") == DataType::Float8E4M3FN));
  BOOST_TEST((hybrid.Float8TypeOf("g") == DataType::Float8E5M2));
  BOOST_TEST((e4m3.Float8TypeOf("g") == DataType::Float8E4M3FN));
  BOOST_TEST(ValueOf(hybrid.Scale("g")) == 57344.0f);
  BOOST_TEST(ValueOf(e4m3.Scale("g")) == 448.0f);
  BOOST_TEST((hybrid.Names() == std::vector<std::string>{"x", "g"}));
}

BOOST_AUTO_TEST_CASE(RegisteringMoreKeepsTheStateOfTheOthers) {
  DelayedScaling recipe({.AmaxHistoryLen = 2});
  recipe.Register("a", TensorRole::Forward, *Zeros({1}));
  mlfw_test::RecordAmax(recipe, "a", 4.0f);
  recipe.UpdateScales();
  mlfw_test::RecordAmax(recipe, "a", 8.0f);
  recipe.Register("b", TensorRole::Gradient, *Zeros({1}));
  BOOST_TEST((recipe.AmaxHistory("a") == std::vector<float>{8.0f, 4.0f}));
  BOOST_TEST(ValueOf(recipe.Scale("a")) == 112.0f);
  BOOST_TEST(ValueOf(recipe.Scale("b")) == 1.0f);
}

BOOST_AUTO_TEST_CASE(AFailingDeviceUpdateLeavesEveryDeviceAsItWas) {
  // Two state tensors (the CPU backend's and another backend's): when the second device's update
  // fails, the first device's history and scales are as they were before UpdateScales().
  DelayedScaling recipe({.AmaxHistoryLen = 3});
  recipe.Register("cpu", TensorRole::Forward, *Zeros({2}));
  recipe.Register("other", TensorRole::Forward, *std::make_shared<FailingUpdateTensor>(Zeros({2})));
  mlfw_test::RecordAmax(recipe, "cpu", 4.0f);
  mlfw_test::RecordAmax(recipe, "other", 8.0f);
  recipe.UpdateScales();
  mlfw_test::RecordAmax(recipe, "cpu", 2.0f);
  mlfw_test::RecordAmax(recipe, "other", 1.0f);
  const std::vector<std::byte> before = recipe.StateDict();
  kFailing.fail = true;
  BOOST_CHECK_THROW(recipe.UpdateScales(), InvalidOperationError);
  kFailing.fail = false;
  BOOST_TEST((recipe.StateDict() == before));
  BOOST_TEST((recipe.AmaxHistory("cpu") == std::vector<float>{2.0f, 0.0f, 4.0f}));
  BOOST_TEST(ValueOf(recipe.Scale("cpu")) == 112.0f);
  // The next update goes on from there.
  recipe.UpdateScales();
  BOOST_TEST((recipe.AmaxHistory("cpu") == std::vector<float>{0.0f, 4.0f, 2.0f}));
  BOOST_TEST(ValueOf(recipe.Scale("other")) == 56.0f);
}

BOOST_AUTO_TEST_CASE(AFailingDeviceWriteLeavesALoadedStateAsItWas) {
  // LoadStateDict() writes one state tensor per device; when the second device's write fails,
  // the first device's state is as it was before the load.
  DelayedScaling saved({.AmaxHistoryLen = 2});
  DelayedScaling recipe({.AmaxHistoryLen = 2});
  for (DelayedScaling* r : {&saved, &recipe}) {
    r->Register("cpu", TensorRole::Forward, *Zeros({2}));
    r->Register("other", TensorRole::Forward, *std::make_shared<FailingUpdateTensor>(Zeros({2})));
  }
  mlfw_test::RecordAmax(saved, "cpu", 4.0f);
  mlfw_test::RecordAmax(saved, "other", 8.0f);
  saved.UpdateScales();
  const std::vector<std::byte> blob = saved.StateDict();
  mlfw_test::RecordAmax(recipe, "cpu", 2.0f);
  const std::vector<std::byte> before = recipe.StateDict();
  kFailing.fail_writes = true;
  BOOST_CHECK_THROW(recipe.LoadStateDict(blob), InvalidOperationError);
  kFailing.fail_writes = false;
  BOOST_TEST((recipe.StateDict() == before));
  BOOST_TEST(ValueOf(recipe.Scale("cpu")) == 1.0f);
  recipe.LoadStateDict(blob);
  BOOST_TEST((recipe.StateDict() == blob));
}

BOOST_AUTO_TEST_CASE(TheStateStepsRefuseAHistoryLengthWhoseRowsWrap) {
  // Float8StateRows(H) = H + 4 wraps around a size_t for H above SIZE_MAX - 4: H = SIZE_MAX - 2
  // makes it 1, so a "state" of one row of 3 slots would pass a size check and the steps would
  // reach rows far outside it. The slice below has guards on either side.
  std::vector<float> buffer(9, 7.0f);
  const std::span<float> state = std::span(buffer).subspan(3, 3);
  Float8ScaleUpdate update;
  update.HistoryLength = std::numeric_limits<std::size_t>::max() - 2;
  update.Count = 3;
  update.Length = 3;
  auto names_history = [](const ArgumentError& e) {
    BOOST_TEST_MESSAGE(e.what());
    return std::string(e.what()).find("'update.HistoryLength'") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(FoldFloat8AmaxOnHost(state, update), ArgumentError, names_history);
  BOOST_TEST(buffer == std::vector<float>(9, 7.0f), boost::test_tools::per_element());
  BOOST_CHECK_EXCEPTION(UpdateFloat8ScalesOnHost(state, update), ArgumentError, names_history);
  BOOST_TEST(buffer == std::vector<float>(9, 7.0f), boost::test_tools::per_element());
  // The largest length whose rows fit is only refused for its size.
  update.HistoryLength = std::numeric_limits<std::size_t>::max() - 4;
  BOOST_CHECK_EXCEPTION(FoldFloat8AmaxOnHost(state, update), ArgumentError, [](const ArgumentError& e) {
    return std::string(e.what()).find("'state'") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(AlgorithmNamesParse) {
  BOOST_TEST((ParseAmaxComputeAlgo("max") == AmaxComputeAlgorithm::Max));
  BOOST_TEST((ParseAmaxComputeAlgo("most_recent") == AmaxComputeAlgorithm::MostRecent));
  BOOST_CHECK_EXCEPTION(ParseAmaxComputeAlgo("mean"), ArgumentError,
                        [](const ArgumentError& e) { return std::string(e.what()).find("mean") != std::string::npos; });
}

BOOST_AUTO_TEST_SUITE_END()
