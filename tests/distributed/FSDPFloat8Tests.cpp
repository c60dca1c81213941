// FP8 under FSDP: amax agreement across ranks (AllReduceAmax, FSDP::AgreeAmax) and FP8
// parameter gathers (tensorwise scales from an agreed amax, the quantized shard kept until the
// masters change), on 1, 2 or 4 ranks and every sharding strategy.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Float8Cast.hpp>
#include <mlframework/core/Float8ScaleUpdate.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/Float8Amax.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/fp8/DelayedScaling.hpp>
#include <mlframework/fp8/Format.hpp>
#include <mlframework/optimizers/SGD.hpp>

#include "amp/FakeDeviceBackend.hpp"
#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
namespace fp8 = mlframework::fp8;
using mlframework::DataType;
using mlframework::GradientMap;
using mlframework::TensorPtr;

namespace {

constexpr DataType kFp8Types[] = {DataType::Float8E4M3FN, DataType::Float8E5M2};

// Values identical on every rank, spread over magnitudes (tiny ones land in FP8's subnormals).
std::vector<float> Values(std::size_t n, float magnitude, int seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float t = std::sin(0.7f * static_cast<float>(i) + static_cast<float>(seed));
    v[i] = magnitude * t * std::pow(10.0f, -static_cast<float>(i % 4));
  }
  return v;
}

// 35 + 3 + 2 elements: "bias" lies on the last rank's shard alone (the other ranks hold an empty
// part of it), "zeros" has amax 0 (scale 1).
GradientMap Model(float magnitude = 3.0f) {
  return {{"weight", mlframework::FromVector(Values(35, magnitude, 1), {7, 5})},
          {"bias", mlframework::FromVector(Values(3, 250.0f, 2), {3})},
          {"zeros", mlframework::FromVector({0.0f, 0.0f}, {2})}};
}

// What the gathered bytes of a parameter must be: the whole FP32 parameter quantized on one rank
// with scale = fp8_max / max|x| (1 for an amax of 0).
struct Quantized {
  std::vector<std::byte> bytes;
  float scale_inv = 1.0f;
};

Quantized Reference(const TensorPtr& full, DataType dtype) {
  const float amax = mlframework::ListAmax(std::span<const TensorPtr>(&full, 1));
  const float scale = mlframework::Float8ScaleFromAmax(amax, fp8::Float8Max(dtype), 0, 1.0f, false);
  const TensorPtr scale_tensor = mlframework::FromVector({scale}, {1});
  const TensorPtr out = mlframework::Zeros(full->GetShape(), dtype);
  mlframework::ScaledCastToFloat8(std::span<const TensorPtr>(&full, 1), std::span<const TensorPtr>(&out, 1),
                                  scale_tensor, nullptr);
  const auto bytes = out->HostBytes();
  return {std::vector<std::byte>(bytes.begin(), bytes.end()), 1.0f / scale};
}

std::vector<std::byte> BytesOf(const TensorPtr& tensor) {
  const auto bytes = tensor->HostBytes();
  return {bytes.begin(), bytes.end()};
}

// Every parameter of @p unit (gathered) holds the bytes of Reference() of @p full, its inverse
// scale is that of the reference, and it decodes to the masters within FP8's rounding.
void ExpectQuantizedFrom(const fsdp::FSDPShardingUnit& unit, const GradientMap& full, DataType dtype) {
  for (const std::string& name : unit.ParameterNames()) {
    BOOST_TEST_CONTEXT("parameter " << name << ", " << mlframework::ToString(dtype)) {
      const TensorPtr& gathered = unit.Parameters().at(name);
      BOOST_TEST((gathered->GetDataType() == dtype));
      const Quantized expected = Reference(full.at(name), dtype);
      BOOST_TEST((BytesOf(gathered) == expected.bytes));
      const TensorPtr& scale_inv = unit.Float8ScaleInverses().at(name);
      BOOST_TEST(scale_inv->Size() == 1u);
      BOOST_TEST(scale_inv->ToFloatVector()[0] == expected.scale_inv);
      const TensorPtr decoded = mlframework::Zeros(gathered->GetShape());
      mlframework::DequantizeFloat8(std::span<const TensorPtr>(&gathered, 1), std::span<const TensorPtr>(&decoded, 1),
                                    scale_inv);
      // Half an ulp of the format relative, or half its smallest subnormal over the scale.
      const bool e4m3 = dtype == DataType::Float8E4M3FN;
      const float relative = e4m3 ? 0.0625f : 0.125f;
      const float absolute = (e4m3 ? std::ldexp(1.0f, -10) : std::ldexp(1.0f, -17)) * expected.scale_inv;
      const std::vector<float> x = full.at(name)->ToFloatVector();
      const std::vector<float> y = decoded->ToFloatVector();
      for (std::size_t i = 0; i < x.size(); ++i) {
        BOOST_TEST(std::abs(y[i] - x[i]) <= std::abs(x[i]) * relative + absolute, name << "[" << i << "]");
      }
    }
  }
}

std::vector<fsdp::FSDPConfig> Strategies(int world) {
  std::vector<fsdp::FSDPConfig> configs{{.Strategy = fsdp::ShardingStrategy::FullShard},
                                        {.Strategy = fsdp::ShardingStrategy::ShardGradOp},
                                        {.Strategy = fsdp::ShardingStrategy::NoShard}};
  if (world % 2 == 0) {
    configs.push_back({.Strategy = fsdp::ShardingStrategy::HybridShard, .ShardGroupSize = world / 2});
  }
  return configs;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpFloat8)

BOOST_AUTO_TEST_CASE(EveryStrategyGathersTheBytesOfTheWholeParameterQuantizedWithTheGlobalAmax) {
  auto group = mlfw_test::WorldGroup();
  for (fsdp::FSDPConfig config : Strategies(group->WorldSize())) {
    for (const DataType dtype : kFp8Types) {
      BOOST_TEST_CONTEXT(fsdp::ToString(config.Strategy) << ", " << mlframework::ToString(dtype)) {
        // The FSDP's dtype for one unit, the unit's own for the other.
        config.ParamDType = dtype;
        fsdp::FSDP model(group, config);
        auto& a = model.RegisterUnit("a", Model());
        fsdp::FSDP own(group, {.Strategy = config.Strategy, .ShardGroupSize = config.ShardGroupSize});
        auto& b = own.RegisterUnit("b", Model(0.01f), {.ParamDType = dtype, .ReduceDType = {}});
        a.Gather();
        ExpectQuantizedFrom(a, Model(), dtype);
        a.Release();
        b.GatherAsync();
        b.WaitGather();
        ExpectQuantizedFrom(b, Model(0.01f), dtype);
        b.Release();
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(TheShardIsQuantizedOnceUntilAStepOrALoadChangesTheMasters) {
  auto group = mlfw_test::WorldGroup();
  for (fsdp::FSDPConfig config : Strategies(group->WorldSize())) {
    BOOST_TEST_CONTEXT(fsdp::ToString(config.Strategy)) {
      config.ParamDType = DataType::Float8E4M3FN;
      fsdp::FSDP model(group, config);
      auto& unit = model.RegisterUnit("u", Model());
      mlframework::optimizers::SGD sgd(model.ShardedParameters(), {.LearningRate = 0.5f});
      const std::vector<std::byte> saved = model.StateDict();
      unit.Gather();
      const std::vector<std::byte> first = BytesOf(unit.GatheredParameter());
      unit.Release();
      // Masters changed behind FSDP's back: the kept FP8 shard is still what is sent.
      unit.LocalShard()->CopyFromFloats(std::vector<float>(unit.ShardSize(), 7.0f));
      unit.Gather();
      BOOST_TEST((BytesOf(unit.GatheredParameter()) == first));
      // A step: gradients of 1 move every master by -0.5; the next gather quantizes them anew.
      GradientMap gradients;
      for (const auto& [name, tensor] : Model()) {
        gradients[name] = mlframework::FromVector(std::vector<float>(tensor->Size(), 1.0f), tensor->GetShape());
      }
      unit.ReduceGradients(gradients);
      unit.Release();
      BOOST_TEST(unit.LocalGradient()->ToFloatVector() == std::vector<float>(unit.ShardSize(), 1.0f),
                 boost::test_tools::per_element());
      model.Step(sgd);
      GradientMap full;
      for (const auto& [name, tensor] : model.FullParameters()) full[name.substr(2)] = tensor;
      unit.Gather();
      ExpectQuantizedFrom(unit, full, DataType::Float8E4M3FN);
      unit.Release();
      // A load puts the first masters back: the bytes of the first gather.
      model.LoadStateDict(saved);
      unit.Gather();
      BOOST_TEST((BytesOf(unit.GatheredParameter()) == first));
      ExpectQuantizedFrom(unit, Model(), DataType::Float8E4M3FN);
      unit.Release();
    }
  }
}

BOOST_AUTO_TEST_CASE(PrefetchingHooksGatherFp8UnitsAsTheSerialCallsDo) {
  // With prefetch the next unit's quantization (its amax all-reduce) runs while this unit's
  // all-gather is in flight: the same bytes as gathering one unit at a time.
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group, {.ParamDType = DataType::Float8E5M2});
  const float magnitudes[] = {3.0f, 0.02f, 700.0f};
  const char* const names[] = {"u0", "u1", "u2"};
  for (std::size_t i = 0; i < 3; ++i) model.RegisterUnit(names[i], Model(magnitudes[i]));
  model.SetPrefetch({.Forward = true, .Backward = true});
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < 3; ++i) {
      model.PreForward(i);
      ExpectQuantizedFrom(model.Unit(i), Model(magnitudes[i]), DataType::Float8E5M2);
      model.PostForward(i);
    }
    for (std::size_t i = 3; i-- > 0;) {
      model.PreBackward(i);
      ExpectQuantizedFrom(model.Unit(i), Model(magnitudes[i]), DataType::Float8E5M2);
      GradientMap gradients;
      for (const auto& [name, tensor] : Model()) {
        gradients[name] = mlframework::FromVector(std::vector<float>(tensor->Size(), 0.0f), tensor->GetShape());
      }
      model.PostBackward(i, gradients);
    }
    model.FinishBackward();
    model.ZeroGrad();
  }
}

BOOST_AUTO_TEST_CASE(ChangingTheParameterDtypeQuantizesAgainAndLeavesFp8Behind) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group, {.ParamDType = DataType::BFloat16});
  auto& unit = model.RegisterUnit("u", Model());
  BOOST_CHECK_THROW((void)unit.Float8ScaleInverses(), mlframework::InvalidOperationError);
  for (const DataType dtype : {DataType::Float8E4M3FN, DataType::Float8E5M2}) {
    model.SetParamDType(dtype);
    BOOST_CHECK_THROW((void)unit.Float8ScaleInverses(), mlframework::InvalidOperationError);  // not gathered yet
    unit.Gather();
    ExpectQuantizedFrom(unit, Model(), dtype);
    BOOST_CHECK_THROW(model.SetParamDType(DataType::BFloat16), mlframework::InvalidOperationError);
    unit.Release();
  }
  model.SetParamDType(DataType::BFloat16);
  unit.Gather();
  BOOST_TEST((unit.Parameters().at("weight")->GetDataType() == DataType::BFloat16));
  BOOST_CHECK_THROW((void)unit.Float8ScaleInverses(), mlframework::InvalidOperationError);
  unit.Release();
}

BOOST_AUTO_TEST_CASE(Fp8ReductionsAreRefusedByField) {
  for (const DataType dtype : kFp8Types) {
    BOOST_CHECK_EXCEPTION(fsdp::FSDP(mlfw_test::WorldGroup(), {.ReduceDType = dtype}), mlframework::ArgumentError,
                          [&](const mlframework::ArgumentError& e) {
                            return e.Parameter() == "ReduceDType" &&
                                   std::string(e.what()).find(mlframework::ToString(dtype)) != std::string::npos;
                          });
    fsdp::FSDP model(mlfw_test::WorldGroup());
    BOOST_CHECK_EXCEPTION(model.RegisterUnit("u", Model(), {.ParamDType = {}, .ReduceDType = dtype}),
                          mlframework::ArgumentError,
                          [](const mlframework::ArgumentError& e) { return e.Parameter() == "precision.ReduceDType"; });
    BOOST_TEST(model.UnitCount() == 0u);
  }
}

// Amax agreement ----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(AgreedAmaxGivesEveryRankTheScalesOfTheLargestAmax) {
  auto group = mlfw_test::WorldGroup();
  const int rank = group->Rank();
  const int world = group->WorldSize();
  for (const bool through_fsdp : {false, true}) {
    fp8::DelayedScaling recipe({.Margin = 1, .AmaxHistoryLen = 4});
    const TensorPtr like = mlframework::Zeros({4});
    recipe.Register("x", fp8::TensorRole::Forward, *like);
    recipe.Register("dy", fp8::TensorRole::Gradient, *like);
    recipe.Register("idle", fp8::TensorRole::Forward, *like);
    // Rank r casts x with amax 1 + r and dy with amax 100 * (world - r); idle stays 0.
    const std::vector<std::string> names{"x", "dy"};
    const std::vector<TensorPtr> src{
        mlframework::FromVector({0.5f, -(1.0f + static_cast<float>(rank)), 0, 0}, {4}),
        mlframework::FromVector({100.0f * static_cast<float>(world - rank), 0, 0, 1}, {4})};
    const std::vector<TensorPtr> dst{mlframework::Zeros({4}, recipe.Float8TypeOf("x")),
                                     mlframework::Zeros({4}, recipe.Float8TypeOf("dy"))};
    recipe.Quantize(names, src, dst);
    if (through_fsdp) {
      fsdp::FSDP model(group);
      model.AgreeAmax(recipe);
    } else {
      dist::AllReduceAmax(*group, recipe);
    }
    BOOST_TEST(recipe.Amax("x")->ToFloatVector()[0] == static_cast<float>(world));
    BOOST_TEST(recipe.Amax("dy")->ToFloatVector()[0] == 100.0f * static_cast<float>(world));
    BOOST_TEST(recipe.Amax("idle")->ToFloatVector()[0] == 0.0f);
    recipe.UpdateScales();
    const float x_scale = mlframework::Float8ScaleFromAmax(static_cast<float>(world), 448.0f, 1, 1.0f, true);
    const float dy_scale =
        mlframework::Float8ScaleFromAmax(100.0f * static_cast<float>(world), 57344.0f, 1, 1.0f, true);
    BOOST_TEST(recipe.Scale("x")->ToFloatVector()[0] == x_scale);
    BOOST_TEST(recipe.Scale("dy")->ToFloatVector()[0] == dy_scale);
    BOOST_TEST(recipe.Scale("idle")->ToFloatVector()[0] == 1.0f);  // amax 0: the previous scale
    // The same scales on every rank, bit for bit.
    for (const std::string name : {"x", "dy"}) {
      const double scale = recipe.Scale(name)->ToFloatVector()[0];
      BOOST_TEST(group->AllReduceHost(scale, dist::ReduceOp::Max) == scale);
      BOOST_TEST(-group->AllReduceHost(-scale, dist::ReduceOp::Max) == scale);
    }
  }
}

BOOST_AUTO_TEST_CASE(ASubsetOfNamesIsAgreedAndTheOthersKeepTheirAmax) {
  auto group = mlfw_test::WorldGroup();
  fp8::DelayedScaling recipe;
  const TensorPtr like = mlframework::Zeros({1});
  recipe.Register("a", fp8::TensorRole::Forward, *like);
  recipe.Register("b", fp8::TensorRole::Forward, *like);
  const float mine = 1.0f + static_cast<float>(group->Rank());
  recipe.Amax("a")->CopyFromFloats(std::vector<float>{mine});
  recipe.Amax("b")->CopyFromFloats(std::vector<float>{mine});
  const std::vector<std::string> only_b{"b"};
  dist::AllReduceAmax(*group, recipe, only_b);
  BOOST_TEST(recipe.Amax("a")->ToFloatVector()[0] == mine);
  BOOST_TEST(recipe.Amax("b")->ToFloatVector()[0] == static_cast<float>(group->WorldSize()));
  dist::AllReduceAmax(*group, recipe, std::span<const std::string>{});  // nothing to do
}

namespace {

// A recipe that has no per-tensor amax (its Amax() refuses), the rest a DelayedScaling's.
class NoAmaxRecipe final : public fp8::IScalingRecipe {
 public:
  std::string_view Name() const noexcept override { return "NoAmax"; }
  void Register(const std::string& name, fp8::TensorRole role, const mlframework::ITensor& like) override {
    inner_.Register(name, role, like);
  }
  bool IsRegistered(const std::string& name) const override { return inner_.IsRegistered(name); }
  std::vector<std::string> Names() const override { return inner_.Names(); }
  DataType Float8TypeOf(const std::string& name) const override { return inner_.Float8TypeOf(name); }
  void Quantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                std::span<const TensorPtr> dst) override {
    inner_.Quantize(names, src, dst);
  }
  void Dequantize(std::span<const std::string> names, std::span<const TensorPtr> src,
                  std::span<const TensorPtr> dst) const override {
    inner_.Dequantize(names, src, dst);
  }
  void UpdateScales() override { inner_.UpdateScales(); }
  TensorPtr Scale(const std::string& name) const override { return inner_.Scale(name); }
  TensorPtr ScaleInv(const std::string& name) const override { return inner_.ScaleInv(name); }
  TensorPtr Amax(const std::string& /*name*/) const override {
    throw mlframework::InvalidOperationError("block scaling keeps no per-tensor amax");
  }
  std::vector<std::byte> StateDict() const override { return inner_.StateDict(); }
  void LoadStateDict(std::span<const std::byte> state) override { inner_.LoadStateDict(state); }

 private:
  fp8::DelayedScaling inner_;
};

bool Names(const mlframework::ArgumentError& e, const std::string& parameter, const std::string& text) {
  return e.Parameter() == parameter && std::string(e.what()).find(text) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(BadAmaxAgreementsThrowOnEveryRankWithNothingChanged) {
  auto group = mlfw_test::WorldGroup();
  fp8::DelayedScaling recipe;
  const TensorPtr like = mlframework::Zeros({1});
  recipe.Register("a", fp8::TensorRole::Forward, *like);
  const float mine = 3.0f + static_cast<float>(group->Rank());
  recipe.Amax("a")->CopyFromFloats(std::vector<float>{mine});
  const std::vector<std::string> unknown{"a", "nope"};
  BOOST_CHECK_EXCEPTION(dist::AllReduceAmax(*group, recipe, unknown), mlframework::ArgumentError,
                        [](const mlframework::ArgumentError& e) { return Names(e, "names", "nope"); });
  const std::vector<std::string> twice{"a", "a"};
  BOOST_CHECK_EXCEPTION(dist::AllReduceAmax(*group, recipe, twice), mlframework::ArgumentError,
                        [](const mlframework::ArgumentError& e) { return Names(e, "names", "twice"); });
  BOOST_TEST(recipe.Amax("a")->ToFloatVector()[0] == mine);
  NoAmaxRecipe blocks;
  blocks.Register("w", fp8::TensorRole::Forward, *like);
  BOOST_CHECK_EXCEPTION(dist::AllReduceAmax(*group, blocks), mlframework::ArgumentError,
                        [](const mlframework::ArgumentError& e) { return Names(e, "recipe", "NoAmax"); });
  // One rank alone is wrong: every rank throws, none is left in the all-reduce.
  if (group->WorldSize() > 1) {
    const std::vector<std::string> mixed{group->Rank() == 0 ? "nope" : "a"};
    BOOST_CHECK_THROW(dist::AllReduceAmax(*group, recipe, mixed), mlframework::ArgumentError);
    BOOST_TEST(recipe.Amax("a")->ToFloatVector()[0] == mine);
  }
}

BOOST_AUTO_TEST_CASE(DeviceAmaxesStayOnTheDeviceAndTwoDevicesAreRefused) {
  // The local group: the agreement is the packing copies alone, on the (fake) device.
  dist::LocalProcessGroup group;
  fp8::DelayedScaling recipe;
  recipe.Register("d0", fp8::TensorRole::Forward, *mlfw_test::FakeTensor({0.0f}, {1}, DataType::Float32, 0));
  recipe.Register("d0b", fp8::TensorRole::Forward, *mlfw_test::FakeTensor({0.0f}, {1}, DataType::Float32, 0));
  recipe.Register("host", fp8::TensorRole::Forward, *mlframework::Zeros({1}));
  recipe.Amax("d0")->CopyFromFloats(std::vector<float>{2.5f});
  const std::int64_t syncs = mlfw_test::FakeBackend().SyncCount();
  const std::vector<std::string> device{"d0", "d0b"};
  dist::AllReduceAmax(group, recipe, device);
  BOOST_TEST(mlfw_test::FakeBackend().SyncCount() == syncs);
  BOOST_TEST(mlfw_test::Peek(recipe.Amax("d0"))[0] == 2.5f);
  const std::vector<std::string> mixed{"d0", "host"};
  BOOST_CHECK_EXCEPTION(dist::AllReduceAmax(group, recipe, mixed), mlframework::ArgumentError,
                        [](const mlframework::ArgumentError& e) { return Names(e, "names", "host"); });
}

BOOST_AUTO_TEST_SUITE_END()
