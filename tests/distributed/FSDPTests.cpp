// FSDP on the world group (1, 2 or 4 ranks) against the same training in one process with
// LocalProcessGroup: losses and parameters to 1e-5 relative, for every sharding strategy;
// agreed overflow skipping; global-norm clipping; state save and restore.
#include <boost/test/unit_test.hpp>

#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>

#include <mlframework/amp/DynamicLossScaler.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPAmpIntegration.hpp>
#include <mlframework/optimizers/Adam.hpp>
#include <mlframework/optimizers/SGD.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlframework::DataType;
using mlfw_test::Mlp;

namespace {

constexpr int kSteps = 20;

struct Run {
  std::vector<double> losses;
  std::vector<double> norms;
  std::vector<float> scales;
  std::vector<bool> skipped;
  mlframework::GradientMap params;
};

enum class Opt { Adam, SGD };

struct Options {
  fsdp::FSDPConfig config{};
  Opt optimizer = Opt::Adam;
  std::optional<float> clip{};                          // max norm
  std::optional<fsdp::FSDPMixedPrecisionConfig> amp{};  // loss scaling + FP16 forward
  std::function<bool(int)> inject{};                    // step -> inject an infinity on the last rank
};

// One training run of kSteps on @p group; every rank trains on its slice of the global batch.
Run Train(const std::shared_ptr<dist::IProcessGroup>& group, const Options& o) {
  fsdp::FSDP model(group, o.config);
  auto& l1 = model.RegisterUnit("layer1", Mlp::Layer1());
  auto& l2 = model.RegisterUnit("layer2", Mlp::Layer2());
  std::unique_ptr<mlframework::amp::IOptimizer> optimizer;
  if (o.optimizer == Opt::Adam) {
    optimizer = std::make_unique<mlframework::optimizers::Adam>(
        model.ShardedParameters(), mlframework::optimizers::AdamOptions{.LearningRate = 0.01f});
  } else {
    optimizer = std::make_unique<mlframework::optimizers::SGD>(
        model.ShardedParameters(), mlframework::optimizers::SGDOptions{.LearningRate = 0.05f, .Momentum = 0.9f});
  }
  std::optional<fsdp::FSDPAmpIntegration> amp;
  if (o.amp) amp.emplace(model, *o.amp);
  const int n = group->WorldSize();
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    l1.Gather();
    l2.Gather();
    if (amp) {
      amp->ApplyMixedPrecision(l1);
      amp->ApplyMixedPrecision(l2);
    }
    const float scale = amp ? amp->Manager().CurrentScale() : 1.0f;
    const auto out = Mlp::Run(l1.Parameters(), l2.Parameters(), Mlp::RankSlice(group->Rank(), n, step), scale);
    l1.ReduceGradients(out.layer1);
    l2.ReduceGradients(out.layer2);
    l1.Release();
    l2.Release();
    run.losses.push_back(group->AllReduceHost(out.loss, dist::ReduceOp::Sum) / n);
    if (o.inject && o.inject(step) && group->Rank() == n - 1) {
      mlframework::backends::cpu::Elements<DataType::Float32>(*l2.LocalGradient())[0] =
          std::numeric_limits<float>::infinity();
    }
    bool skip = false;
    if (amp) {
      amp->ApplyGradientFP32(l1);
      skip = amp->Manager().UnscaleAndCheckOverflow(model.LocalGradients());
      run.scales.push_back(amp->Manager().CurrentScale());
    }
    run.skipped.push_back(skip);
    if (skip) {
      model.ZeroGrad();
      continue;
    }
    if (o.clip) run.norms.push_back(model.ClipGradNorm(*o.clip));
    model.Step(*optimizer);
  }
  run.params = model.FullParameters();
  return run;
}

void ExpectSame(const Run& got, const Run& want, double tolerance) {
  BOOST_REQUIRE_EQUAL(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < got.losses.size(); ++i) {
    BOOST_CHECK_CLOSE_FRACTION(got.losses[i], want.losses[i], tolerance);
  }
  BOOST_REQUIRE_EQUAL(got.norms.size(), want.norms.size());
  for (std::size_t i = 0; i < got.norms.size(); ++i) BOOST_CHECK_CLOSE_FRACTION(got.norms[i], want.norms[i], tolerance);
  BOOST_CHECK(got.scales == want.scales);
  BOOST_CHECK(got.skipped == want.skipped);
  BOOST_REQUIRE_EQUAL(got.params.size(), want.params.size());
  for (const auto& [name, tensor] : want.params) {
    const double rel = mlfw_test::RelativeDifference(got.params.at(name)->ToFloatVector(), tensor->ToFloatVector());
    BOOST_TEST_INFO("parameter " << name);
    BOOST_CHECK_LE(rel, tolerance);
  }
}

std::shared_ptr<dist::IProcessGroup> Local() { return dist::MakeLocalProcessGroup(); }

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpTraining)

BOOST_AUTO_TEST_CASE(EveryStrategyMatchesOneProcess) {
  auto group = mlfw_test::WorldGroup();
  for (const auto strategy :
       {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::ShardGradOp, fsdp::ShardingStrategy::NoShard}) {
    for (const Opt opt : {Opt::Adam, Opt::SGD}) {
      BOOST_TEST_CONTEXT("strategy " << fsdp::ToString(strategy) << ", optimizer " << static_cast<int>(opt)
                                     << ", world " << group->WorldSize()) {
        const Options options{.config = {.Strategy = strategy}, .optimizer = opt};
        const Run reference = Train(Local(), options);
        const Run sharded = Train(group, options);
        ExpectSame(sharded, reference, 1e-5);
        BOOST_CHECK_LT(reference.losses.back(), reference.losses.front());  // it trains
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(SixteenBitGatherMatchesOneProcess) {
  auto group = mlfw_test::WorldGroup();
  for (const DataType dtype : {DataType::Float16, DataType::BFloat16}) {
    const Options options{.config = {.Strategy = fsdp::ShardingStrategy::FullShard, .ParamDType = dtype}};
    ExpectSame(Train(group, options), Train(Local(), options), 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(ShardLayoutIsPaddedToWorldSize) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  auto& unit = model.RegisterUnit("layer2", Mlp::Layer2());
  const auto n = static_cast<std::size_t>(group->WorldSize());
  BOOST_CHECK_EQUAL(unit.NumElements(), 33u);
  BOOST_CHECK_EQUAL(unit.PaddedSize() % n, 0u);
  BOOST_CHECK_LT(unit.PaddedSize() - unit.NumElements(), n);
  BOOST_CHECK_EQUAL(unit.ShardSize() * n, unit.PaddedSize());
  BOOST_CHECK_EQUAL(unit.LocalShard()->Size(), unit.ShardSize());
  BOOST_CHECK_EQUAL(unit.ShardOffset(), unit.ShardSize() * static_cast<std::size_t>(group->Rank()));
  BOOST_CHECK(!unit.IsGathered());
  BOOST_CHECK(!unit.GatheredParameter());
  unit.Gather();
  BOOST_CHECK_EQUAL(unit.GatheredParameter()->Size(), unit.PaddedSize());
  BOOST_CHECK(unit.Parameters().at("weight")->ToFloatVector() == Mlp::Layer2().at("weight")->ToFloatVector());
  unit.Release();
  BOOST_CHECK(!unit.GatheredParameter());
  BOOST_CHECK_THROW(unit.Parameters(), mlframework::InvalidOperationError);
}

BOOST_AUTO_TEST_CASE(StateRoundTripRestoresShards) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  model.RegisterUnit("layer1", Mlp::Layer1());
  const auto saved = model.StateDict();
  const auto before = model.FullParameters();
  mlframework::optimizers::SGD sgd(model.ShardedParameters(), {.LearningRate = 0.1f});
  auto& unit = model.Unit("layer1");
  unit.Gather();
  unit.ReduceGradients(Mlp::Layer1());  // any gradient of the right shapes
  unit.Release();
  model.Step(sgd);
  BOOST_CHECK(model.FullParameters().at("layer1.weight")->ToFloatVector() !=
              before.at("layer1.weight")->ToFloatVector());
  model.LoadStateDict(saved);
  BOOST_CHECK(model.FullParameters().at("layer1.weight")->ToFloatVector() ==
              before.at("layer1.weight")->ToFloatVector());
}

BOOST_AUTO_TEST_CASE(ReduceGradientsTwiceAccumulates) {
  auto group = mlfw_test::WorldGroup();
  for (const auto strategy : {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::NoShard}) {
    fsdp::FSDP model(group, {.Strategy = strategy, .ReduceDType = DataType::BFloat16});
    auto& unit = model.RegisterUnit("layer2", Mlp::Layer2());
    unit.Gather();
    unit.ReduceGradients(Mlp::Layer2());
    const std::vector<float> once = unit.LocalGradient()->ToFloatVector();
    unit.ReduceGradients(Mlp::Layer2());
    const std::vector<float> twice = unit.LocalGradient()->ToFloatVector();
    unit.Release();
    BOOST_REQUIRE_EQUAL(once.size(), unit.ShardSize());
    for (std::size_t i = 0; i < once.size(); ++i) BOOST_CHECK_EQUAL(twice[i], 2.0f * once[i]);
    // The average over ranks of identical gradients is the gradient (BF16 reduce: 3 digits).
    const std::vector<float> full = Mlp::Layer2().at("bias")->ToFloatVector();
    if (unit.ShardOffset() == 0) BOOST_CHECK_CLOSE_FRACTION(once[0], full[0], 1e-2);
  }
}

namespace {
mlframework::GradientMap Ramp(std::size_t count, float start) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = start + static_cast<float>(i);
  return {{"w", mlframework::FromVector(values, {count})}};
}
}  // namespace

// Release() hands the gathered memory to the FSDP's cache and the next Gather() reuses it;
// memory the framework still references past Release() is never handed to another unit.
BOOST_AUTO_TEST_CASE(ReleasedBuffersAreReusedUnlessStillReferenced) {
  namespace cpu = mlframework::backends::cpu;
  auto group = mlfw_test::WorldGroup();
  for (const DataType dtype : {DataType::Float32, DataType::Float16}) {
    fsdp::FSDP model(group, {.ParamDType = dtype});
    auto& a = model.RegisterUnit("a", Ramp(64, 0.0f));
    auto& b = model.RegisterUnit("b", Ramp(64, 100.0f));
    BOOST_CHECK_GE(model.CachedBufferLimit(), 64u * mlframework::ElementSize(dtype));
    a.Gather();
    const void* first = cpu::Data(*a.GatheredParameter());
    a.Release();
    BOOST_CHECK_GT(model.CachedBufferBytes(), 0u);
    b.Gather();
    BOOST_CHECK_EQUAL(cpu::Data(*b.GatheredParameter()), first);
    BOOST_CHECK(b.Parameters().at("w")->ToFloatVector() == Ramp(64, 100.0f).at("w")->ToFloatVector());
    const mlframework::TensorPtr kept = b.Parameters().at("w");
    b.Release();
    a.Gather();
    BOOST_CHECK_NE(cpu::Data(*a.GatheredParameter()), cpu::Data(*kept));
    BOOST_CHECK(a.Parameters().at("w")->ToFloatVector() == Ramp(64, 0.0f).at("w")->ToFloatVector());
    BOOST_CHECK(kept->ToFloatVector() == Ramp(64, 100.0f).at("w")->ToFloatVector());
    // One FP32 parameter of a multiple of the world size: reduced straight from the gradient.
    a.ReduceGradients(Ramp(64, 1.0f));
    const auto expected = Ramp(64, 1.0f).at("w")->ToFloatVector();
    const auto shard = a.LocalGradient()->ToFloatVector();
    BOOST_REQUIRE_EQUAL(shard.size(), a.ShardSize());
    for (std::size_t i = 0; i < shard.size(); ++i) BOOST_CHECK_EQUAL(shard[i], expected[a.ShardOffset() + i]);
    a.Release();
    // Two parameters are flattened into a pooled buffer, which goes back to the cache too:
    // while `c` is gathered (its buffer in use), the cache holds at least that FP32 buffer.
    auto& c = model.RegisterUnit("c", {{"w", Ramp(40, 0.0f).at("w")}, {"b", Ramp(24, 0.0f).at("w")}});
    model.ReleaseCachedBuffers();
    c.Gather();
    c.ReduceGradients({{"w", Ramp(40, 0.0f).at("w")}, {"b", Ramp(24, 0.0f).at("w")}});
    BOOST_CHECK_GE(model.CachedBufferBytes(), c.PaddedSize() * sizeof(float));
    c.Release();
    BOOST_CHECK_LE(model.CachedBufferBytes(), model.CachedBufferLimit());
    model.ReleaseCachedBuffers();
    BOOST_CHECK_EQUAL(model.CachedBufferBytes(), 0u);
  }
}

// Units gathered at the same time (prefetching) each get their own buffer; after they are all
// released the cache keeps no more than one use of the largest unit and frees the rest.
BOOST_AUTO_TEST_CASE(CacheStaysWithinItsLimit) {
  namespace cpu = mlframework::backends::cpu;
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  const std::vector<std::size_t> sizes{64, 128, 192, 256, 320, 320, 320, 320, 320, 320};
  std::vector<fsdp::FSDPShardingUnit*> units;
  for (std::size_t u = 0; u < sizes.size(); ++u) {
    units.push_back(&model.RegisterUnit(std::to_string(u), Ramp(sizes[u], 1.0f)));
  }
  for (auto* unit : units) unit->Gather();
  std::set<const void*> all;
  std::set<const void*> largest;
  for (auto* unit : units) {
    all.insert(cpu::Data(*unit->GatheredParameter()));
    if (unit->NumElements() == 320) largest.insert(cpu::Data(*unit->GatheredParameter()));
  }
  BOOST_CHECK_EQUAL(all.size(), units.size());
  for (auto* unit : units) unit->Release();
  // 2560 FP32 elements were gathered at once; the cache keeps at most its limit of them.
  BOOST_CHECK_LT(model.CachedBufferLimit(), 2560u * sizeof(float));
  BOOST_CHECK_GT(model.CachedBufferBytes(), 0u);
  BOOST_CHECK_LE(model.CachedBufferBytes(), model.CachedBufferLimit());
  // The smallest go first: a largest unit gathered again reuses one of the largest buffers.
  units.back()->Gather();
  BOOST_CHECK(largest.count(cpu::Data(*units.back()->GatheredParameter())) == 1);
  units.back()->Release();
}

// A reused flat gradient buffer still holds the last unit's values: the padding past the
// unit's elements must be zeroed, or it lands in the last rank's gradient shard.
BOOST_AUTO_TEST_CASE(ReusedGradientBufferPaddingIsZero) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  auto& big1 = model.RegisterUnit("big1", Ramp(256, 1000.0f));
  auto& big2 = model.RegisterUnit("big2", Ramp(256, 5000.0f));
  auto& odd = model.RegisterUnit("odd", Mlp::Layer2());  // 33 elements: padded on 2 and 4 ranks
  big1.Gather();
  big2.Gather();
  big1.Release();
  big2.Release();  // two FP32 blocks full of large values in the cache
  odd.Gather();
  odd.ReduceGradients(Mlp::Layer2());
  const std::vector<float> gradient = odd.LocalGradient()->ToFloatVector();
  odd.Release();
  std::vector<float> full;
  for (const auto& name : odd.ParameterNames()) {
    const auto values = Mlp::Layer2().at(name)->ToFloatVector();
    full.insert(full.end(), values.begin(), values.end());
  }
  full.resize(odd.PaddedSize(), 0.0f);
  BOOST_REQUIRE_EQUAL(gradient.size(), odd.ShardSize());
  for (std::size_t i = 0; i < gradient.size(); ++i) {
    BOOST_CHECK_CLOSE_FRACTION(gradient[i], full[odd.ShardOffset() + i], 1e-6);
    if (odd.ShardOffset() + i >= odd.NumElements()) BOOST_CHECK_EQUAL(gradient[i], 0.0f);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(FsdpOverflow)

BOOST_AUTO_TEST_CASE(InfinityOnOneRankSkipsEverywhere) {
  auto group = mlfw_test::WorldGroup();
  const fsdp::FSDPMixedPrecisionConfig amp{.InitialLossScale = 1024.0f, .LossScaleSteps = 2};
  Options options{.amp = amp, .inject = [](int step) { return step % 2 == 1; }};
  const Run sharded = Train(group, options);
  const Run reference = Train(Local(), options);
  // Scale trajectory, skipped steps, losses and parameters equal the single-process run.
  ExpectSame(sharded, reference, 1e-5);
  for (int step = 0; step < kSteps; ++step) BOOST_CHECK_EQUAL(sharded.skipped[step], step % 2 == 1);
  // Every rank holds the same scale.
  for (const float scale : sharded.scales) {
    BOOST_CHECK_EQUAL(group->AllReduceHost(scale, dist::ReduceOp::Max), scale);
    BOOST_CHECK_EQUAL(-group->AllReduceHost(-scale, dist::ReduceOp::Max), scale);
  }
  // The trajectory amp::DynamicLossScaler follows for "overflow on odd steps".
  mlframework::amp::DynamicLossScaler scaler({.InitialScale = amp.InitialLossScale,
                                              .GrowthFactor = amp.LossScaleGrowthFactor,
                                              .BackoffFactor = amp.LossScaleBackoffFactor,
                                              .GrowthInterval = amp.LossScaleSteps,
                                              .MinScale = amp.MinLossScale,
                                              .MaxScale = amp.MaxLossScale});
  for (int step = 0; step < kSteps; ++step) {
    scaler.UpdateScale(step % 2 == 1);
    BOOST_CHECK_EQUAL(sharded.scales[step], scaler.CurrentScale());
  }
  BOOST_CHECK_NE(sharded.scales.front(), sharded.scales.back());  // the scale moved
}

BOOST_AUTO_TEST_CASE(SkippedStepLeavesParametersUnchanged) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  auto& unit = model.RegisterUnit("layer1", Mlp::Layer1());
  fsdp::FSDPAmpIntegration amp(model, fsdp::FSDPMixedPrecisionConfig{.InitialLossScale = 8.0f});
  const auto before = model.FullParameters();
  unit.Gather();
  unit.ReduceGradients(Mlp::Layer1());
  unit.Release();
  if (group->Rank() == 0) {
    mlframework::backends::cpu::Elements<DataType::Float32>(*unit.LocalGradient())[0] =
        std::numeric_limits<float>::quiet_NaN();
  }
  BOOST_CHECK(amp.CheckOverflow(model.LocalGradients()));
  BOOST_CHECK_EQUAL(amp.Manager().CurrentScale(), 4.0f);
  model.ZeroGrad();
  BOOST_CHECK(model.FullParameters().at("layer1.weight")->ToFloatVector() ==
              before.at("layer1.weight")->ToFloatVector());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(FsdpClipping)

BOOST_AUTO_TEST_CASE(GlobalNormClippingMatchesOneProcess) {
  auto group = mlfw_test::WorldGroup();
  for (const auto strategy : {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::NoShard}) {
    const Options options{.config = {.Strategy = strategy}, .optimizer = Opt::SGD, .clip = 0.05f};
    const Run sharded = Train(group, options);
    const Run reference = Train(Local(), options);
    ExpectSame(sharded, reference, 1e-5);
    BOOST_CHECK_GT(reference.norms.front(), 0.05);  // clipping was active
    for (const double norm : sharded.norms) {
      BOOST_CHECK_EQUAL(group->AllReduceHost(norm, dist::ReduceOp::Max), norm);  // same on every rank
    }
  }
}

BOOST_AUTO_TEST_CASE(ClipArgumentChecked) {
  fsdp::FSDP model(mlfw_test::WorldGroup());
  BOOST_CHECK_THROW(model.ClipGradNorm(0.0f), mlframework::ArgumentError);
  BOOST_CHECK_THROW(model.ClipGradNorm(std::numeric_limits<float>::infinity()), mlframework::ArgumentError);
}

// A bound that differs between ranks, or is invalid on one rank only, is refused on every rank
// before the norm's collectives (no rank is left waiting in them), with the gradients unchanged.
BOOST_AUTO_TEST_CASE(BoundsThatDifferBetweenRanksAreRefusedOnEveryRank) {
  auto group = mlfw_test::WorldGroup();
  if (group->WorldSize() == 1) {
    BOOST_TEST_MESSAGE("world size 1: no second rank to disagree with (covered under mpiexec -n 2 and -n 4)");
    return;
  }
  fsdp::FSDP model(group);
  auto& unit = model.RegisterUnit("layer1", Mlp::Layer1());
  unit.Gather();
  unit.ReduceGradients(Mlp::Layer1());
  unit.Release();
  const std::vector<float> before = unit.LocalGradient()->ToFloatVector();
  const bool first = group->Rank() == 0;
  for (const float bound : {0.01f, std::numeric_limits<float>::quiet_NaN(), -1.0f}) {
    BOOST_TEST_CONTEXT("rank 0's bound " << bound) {
      try {
        static_cast<void>(model.ClipGradNorm(first ? bound : 100.0f));
        BOOST_ERROR("rank " << group->Rank() << ": clipped while the ranks' bounds differ");
      } catch (const mlframework::ArgumentError& error) {
        BOOST_TEST(error.Parameter() == "max_norm");
      }
      BOOST_TEST(unit.LocalGradient()->ToFloatVector() == before, boost::test_tools::per_element());
    }
  }
  // The ranks are still in step.
  BOOST_TEST(model.ClipGradNorm(1e6f) > 0.0);
}

BOOST_AUTO_TEST_SUITE_END()
