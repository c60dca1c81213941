// BF16 master shards (FSDPConfig::MasterDType): the optimizer updates the BF16 shard itself, with
// stochastic rounding or a 16-bit remainder, and gives the bits of the Adam class over tensors
// holding the same shards, with the same gradients (at one rank: the model's own parameters);
// gathers and FullParameters() widen the shard, clipping and the gradient shards stay FP32, and an
// optimizer whose masters do not fit the shard dtype is refused. Runs in one process and under
// mpiexec with 2 and 4 ranks.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/Adam.hpp>
#include <mlframework/optimizers/SGD.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace fsdp = mlframework::distributed::fsdp;
namespace optim = mlframework::optimizers;
using mlframework::DataType;
using mlframework::GradientMap;
using mlframework::MasterFormat;
using mlframework::StateFormat;

namespace {

// Two units of one parameter each: 111 and 20 elements (padded at 2 and 4 ranks).
const std::vector<std::pair<std::string, std::size_t>> kUnits{{"embed", 111}, {"head", 20}};

GradientMap UnitParameters(std::size_t u) {
  const std::size_t n = kUnits[u].second;
  std::vector<float> w(n);
  // FP32 values that BF16 cannot hold: registration rounds them into the shard.
  for (std::size_t i = 0; i < n; ++i) w[i] = 0.7f * std::sin(0.21f * static_cast<float>(i) + static_cast<float>(u));
  return {{"w", mlframework::FromVector(w, {n})}};
}

optim::AdamOptions BFloat16Adam(MasterFormat masters, StateFormat first, StateFormat second) {
  optim::AdamOptions options = optim::AdamOptions::AdamW(1e-2, 1e-2);
  options.Masters = masters;
  options.RoundingSeed = 20261128;
  options.FirstMomentFormat = first;
  options.SecondMomentFormat = second;
  options.StateBlockSize = 32;
  return options;
}

// An SGD that claims BF16 masters: what a user optimizer over the FSDP's FP32 shards could report.
class ClaimsBFloat16Masters final : public mlframework::amp::IOptimizer, public mlframework::amp::IOptimizerState {
 public:
  explicit ClaimsBFloat16Masters(GradientMap parameters) : sgd_(std::move(parameters), {.LearningRate = 0.1}) {}
  GradientMap GetGradients() override { return sgd_.GetGradients(); }
  void SetGradients(const GradientMap& gradients) override { sgd_.SetGradients(gradients); }
  void Step() override { sgd_.Step(); }
  IOptimizerState* State() noexcept override { return this; }
  std::string StateKind() const override { return "ClaimsBFloat16Masters"; }
  std::vector<std::pair<std::string, double>> StateOptions() const override { return {}; }
  double StateLearningRate() const noexcept override { return sgd_.StateLearningRate(); }
  void SetLearningRate(double learning_rate) override { sgd_.SetLearningRate(learning_rate); }
  std::int64_t StepCount() const noexcept override { return sgd_.StepCount(); }
  const GradientMap& Parameters() const noexcept override { return sgd_.Parameters(); }
  std::vector<std::string> StateVectorNames() const override { return {}; }
  std::span<const float> StateVector(const std::string& name, std::size_t index) const override {
    return sgd_.StateVector(name, index);
  }
  void ImportState(const std::map<std::string, mlframework::amp::OptimizerParameterState>& state,
                   std::int64_t steps) override {
    sgd_.ImportState(state, steps);
  }
  MasterFormat StateMasterFormat() const noexcept override { return MasterFormat::BFloat16StochasticRounding; }

 private:
  optim::SGD sgd_;
};

// FSDP::Step() with @p optimizer over @p model's one unit is an ArgumentError naming `optimizer`
// whose message holds @p advice, and the shard stays as it was.
void ExpectStepRefused(fsdp::FSDP& model, mlframework::amp::IOptimizer& optimizer, const std::string& advice) {
  fsdp::FSDPShardingUnit& unit = model.Unit(0);
  unit.SetLocalGradient(mlfw_test::Make(std::vector<float>(unit.ShardSize(), 1.0f), DataType::Float32));
  const std::vector<float> before = unit.LocalShard()->ToFloatVector();
  try {
    model.Step(optimizer);
    BOOST_FAIL("masters that do not fit the shard dtype must be refused");
  } catch (const mlframework::ArgumentError& error) {
    BOOST_TEST(error.Parameter() == "optimizer");
    BOOST_TEST(std::string(error.what()).find(advice) != std::string::npos, error.what());
  }
  BOOST_TEST(mlfw_test::SameBits(unit.LocalShard()->ToFloatVector(), before));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpBFloat16Masters)

BOOST_AUTO_TEST_CASE(bf16_master_shards_step_to_the_bits_of_the_adam_class_on_the_same_shards) {
  auto world = mlfw_test::WorldGroup();
  const int rank = world->Rank();
  for (const auto& [masters, first, second] :
       {std::tuple{MasterFormat::BFloat16StochasticRounding, StateFormat::Float32, StateFormat::Float32},
        std::tuple{MasterFormat::BFloat16StochasticRounding, StateFormat::Int8Block, StateFormat::UInt8Block},
        std::tuple{MasterFormat::BFloat16Remainder, StateFormat::BFloat16, StateFormat::Float16},
        // Shards of whole blocks of 32 (FSDPConfig::ShardAlignment): units padded well past the world size.
        std::tuple{MasterFormat::BFloat16StochasticRounding, StateFormat::Int8Block, StateFormat::Float32}}) {
    const std::size_t alignment = second == StateFormat::Float32 && first == StateFormat::Int8Block ? 32 : 1;
    BOOST_TEST_CONTEXT(mlframework::ToString(masters)
                       << " with " << mlframework::ToString(first) << " moments, shards aligned to " << alignment) {
      const optim::AdamOptions options = BFloat16Adam(masters, first, second);
      fsdp::FSDP model(
          world, {.ParamDType = DataType::BFloat16, .MasterDType = DataType::BFloat16, .ShardAlignment = alignment});
      // The reference: the Adam class over BF16 tensors holding this rank's shards as registered
      // (the FP32 parameters rounded to nearest even; at one rank the whole parameters).
      GradientMap reference_parameters;
      for (std::size_t u = 0; u < kUnits.size(); ++u) {
        const fsdp::FSDPShardingUnit& unit = model.RegisterUnit(kUnits[u].first, UnitParameters(u));
        BOOST_TEST((unit.MasterDType() == DataType::BFloat16));
        BOOST_TEST((unit.LocalShard()->GetDataType() == DataType::BFloat16));
        BOOST_TEST(unit.ShardSize() % alignment == 0U);
        const std::vector<float> full = UnitParameters(u).at("w")->ToFloatVector();
        std::vector<float> shard(unit.ShardSize(), 0.0f);
        for (std::size_t i = 0; i < shard.size() && unit.ShardOffset() + i < full.size(); ++i) {
          shard[i] = full[unit.ShardOffset() + i];
        }
        reference_parameters.emplace(unit.Name(), mlfw_test::Make(shard, DataType::BFloat16));
      }
      optim::Adam adam(model.ShardedParameters(), options);
      optim::Adam reference(reference_parameters, options);
      // FSDP::Step() keys stochastic rounding by the element's index in the unit: the reference
      // draws by the same indices.
      std::map<std::string, std::uint64_t> offsets;
      for (std::size_t u = 0; u < kUnits.size(); ++u)
        offsets.emplace(model.Unit(u).Name(), model.Unit(u).ShardOffset());
      reference.SetElementOffsets(offsets);
      for (int step = 0; step < 4; ++step) {
        for (std::size_t u = 0; u < kUnits.size(); ++u) {
          fsdp::FSDPShardingUnit& unit = model.Unit(u);
          unit.Gather();
          unit.ReduceGradients(
              {{"w", mlfw_test::Make(mlfw_test::RankValues(unit.NumElements(), rank, 0.3f * static_cast<float>(step)),
                                     DataType::Float32)}});
          unit.Release();
        }
        // Clipping scales the FP32 gradient shards; the reference gets the same gradients.
        model.ClipGradNorm(2.0f);
        GradientMap gradients;
        for (const auto& [name, gradient] : model.LocalGradients()) gradients.emplace(name, gradient->Clone());
        model.Step(adam);
        reference.SetGradients(gradients);
        reference.Step();
      }
      for (std::size_t u = 0; u < kUnits.size(); ++u) {
        fsdp::FSDPShardingUnit& unit = model.Unit(u);
        const std::vector<float> shard = unit.LocalShard()->ToFloatVector();
        BOOST_TEST(mlfw_test::SameBits(shard, reference.Parameters().at(unit.Name())->ToFloatVector()));
        BOOST_TEST(mlfw_test::SameBits(adam.StateMasterValues(unit.Name()), reference.StateMasterValues(unit.Name())));
        for (std::size_t v = 0; v < 2; ++v) {
          const auto a = adam.StateVector(unit.Name(), v);
          const auto b = reference.StateVector(unit.Name(), v);
          BOOST_TEST(mlfw_test::SameBits({a.begin(), a.end()}, {b.begin(), b.end()}));
        }
        // The BF16 gather carries the shard's bits; FullParameters() widens them exactly.
        unit.Gather();
        const std::vector<float> gathered = unit.GatheredParameter()->ToFloatVector();
        unit.Release();
        const std::vector<float> full = model.FullParameters().at(unit.Name() + ".w")->ToFloatVector();
        BOOST_TEST((model.FullParameters().at(unit.Name() + ".w")->GetDataType() == DataType::Float32));
        for (std::size_t i = 0; i < shard.size() && unit.ShardOffset() + i < unit.NumElements(); ++i) {
          BOOST_TEST(gathered[unit.ShardOffset() + i] == shard[i]);
          BOOST_TEST(full[unit.ShardOffset() + i] == shard[i]);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_unit_may_keep_its_own_master_dtype) {
  auto world = mlfw_test::WorldGroup();
  fsdp::FSDP model(world, {.MasterDType = DataType::BFloat16});
  const auto& norm = model.RegisterUnit("norm", UnitParameters(1), {.MasterDType = DataType::Float32});
  const auto& embed = model.RegisterUnit("embed", UnitParameters(0));
  BOOST_TEST((norm.LocalShard()->GetDataType() == DataType::Float32));
  BOOST_TEST((embed.LocalShard()->GetDataType() == DataType::BFloat16));
  // An FP32 gather of the BF16 shard widens it exactly.
  model.Unit("embed").Gather();
  const std::vector<float> gathered = embed.GatheredParameter()->ToFloatVector();
  model.Unit("embed").Release();
  const std::vector<float> shard = embed.LocalShard()->ToFloatVector();
  for (std::size_t i = 0; i < shard.size() && embed.ShardOffset() + i < embed.NumElements(); ++i) {
    BOOST_TEST(gathered[embed.ShardOffset() + i] == shard[i]);
  }
}

BOOST_AUTO_TEST_CASE(masters_that_do_not_fit_the_shard_dtype_are_refused) {
  auto world = mlfw_test::WorldGroup();
  for (const DataType bad : {DataType::Float16, DataType::Float8E4M3FN}) {
    try {
      fsdp::FSDP model(world, {.MasterDType = bad});
      BOOST_FAIL("a " << mlframework::ToString(bad) << " master shard must be refused");
    } catch (const mlframework::ArgumentError& error) {
      BOOST_TEST(error.Parameter() == "MasterDType");
    }
    fsdp::FSDP model(world);
    try {
      model.RegisterUnit("embed", UnitParameters(0), {.MasterDType = bad});
      BOOST_FAIL("a " << mlframework::ToString(bad) << " master shard must be refused");
    } catch (const mlframework::ArgumentError& error) {
      BOOST_TEST(error.Parameter() == "precision.MasterDType");
    }
    BOOST_TEST(model.UnitCount() == 0U);
  }

  // BF16 shards under an optimizer with FP32 masters (copies the FSDP would never see).
  {
    fsdp::FSDP model(world, {.MasterDType = DataType::BFloat16});
    model.RegisterUnit("embed", UnitParameters(0));
    optim::Adam adam(model.ShardedParameters());
    ExpectStepRefused(model, adam, "BFloat16StochasticRounding or BFloat16Remainder");
    BOOST_TEST(adam.StepCount() == 0);
    BOOST_CHECK_THROW(model.SaveShardedCheckpoint({.Optimizer = &adam}), mlframework::ArgumentError);
  }
  // FP32 shards under an optimizer that keeps BF16 masters.
  {
    fsdp::FSDP model(world);
    model.RegisterUnit("embed", UnitParameters(0));
    ClaimsBFloat16Masters claims(model.ShardedParameters());
    ExpectStepRefused(model, claims, "set FSDPConfig::MasterDType");
    // The Adam class itself refuses BF16 masters over FP32 tensors.
    BOOST_CHECK_THROW(optim::Adam(model.ShardedParameters(), BFloat16Adam(MasterFormat::BFloat16Remainder,
                                                                          StateFormat::Float32, StateFormat::Float32)),
                      mlframework::ArgumentError);
  }
}

BOOST_AUTO_TEST_SUITE_END()
