// Bad input to FSDP: every rank gets a clear exception (no rank is left waiting), and the
// objects keep working afterwards.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/amp/IOptimizerState.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/SGD.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlframework::GradientMap;
using mlframework::Zeros;
using mlfw_test::Mlp;

namespace {

// Forwards to a real group but reports a different world size on rank 0 (a misconfigured job).
class WrongWorldSize final : public dist::IProcessGroup {
 public:
  explicit WrongWorldSize(std::shared_ptr<dist::IProcessGroup> inner) : inner_(std::move(inner)) {}
  int Rank() const noexcept override { return inner_->Rank(); }
  int WorldSize() const noexcept override { return inner_->WorldSize() + (inner_->Rank() == 0 ? 1 : 0); }
  std::string_view BackendName() const noexcept override { return inner_->BackendName(); }
  void AllGather(const mlframework::ITensor& i, mlframework::ITensor& o) override { inner_->AllGather(i, o); }
  void ReduceScatter(const mlframework::ITensor& i, mlframework::ITensor& o, dist::ReduceOp op) override {
    inner_->ReduceScatter(i, o, op);
  }
  void AllReduce(mlframework::ITensor& t, dist::ReduceOp op) override { inner_->AllReduce(t, op); }
  void Broadcast(mlframework::ITensor& t, int root) override { inner_->Broadcast(t, root); }
  void Barrier() override { inner_->Barrier(); }
  void AllReduceHost(std::span<double> v, dist::ReduceOp op) override { inner_->AllReduceHost(v, op); }
  using IProcessGroup::AllReduceHost;
  void Abort(const std::string& m) noexcept override { inner_->Abort(m); }

 private:
  std::shared_ptr<dist::IProcessGroup> inner_;
};

// An optimizer that records what FSDP::Step() hands it, and refuses its gradients on request
// (as a user's optimizer may on one rank only).
class RecordingOptimizer final : public mlframework::amp::IOptimizer, public mlframework::amp::IOptimizerState {
 public:
  explicit RecordingOptimizer(GradientMap parameters) : parameters_(std::move(parameters)) {}
  bool refuse = false;
  int offset_calls = 0;
  int steps = 0;
  GradientMap GetGradients() override { return gradients_; }
  void SetGradients(const GradientMap& gradients) override {
    if (refuse) throw mlframework::ArgumentError("gradients", "refused on purpose");
    gradients_ = gradients;
  }
  void Step() override { ++steps; }
  mlframework::amp::IOptimizerState* State() noexcept override { return this; }
  std::string StateKind() const override { return "Recording"; }
  std::vector<std::pair<std::string, double>> StateOptions() const override { return {}; }
  double StateLearningRate() const noexcept override { return 1.0; }
  void SetLearningRate(double /*learning_rate*/) override {}
  std::int64_t StepCount() const noexcept override { return steps; }
  const GradientMap& Parameters() const noexcept override { return parameters_; }
  std::vector<std::string> StateVectorNames() const override { return {}; }
  std::span<const float> StateVector(const std::string& /*name*/, std::size_t /*index*/) const override { return {}; }
  void ImportState(const std::map<std::string, mlframework::amp::OptimizerParameterState>& /*state*/,
                   std::int64_t /*steps*/) override {}
  void SetElementOffsets(const std::map<std::string, std::uint64_t>& /*offsets*/) override { ++offset_calls; }

 private:
  GradientMap parameters_;
  GradientMap gradients_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpBadInput)

BOOST_AUTO_TEST_CASE(MismatchedWorldSizesFailOnEveryRank) {
  auto group = mlfw_test::WorldGroup();
  if (group->WorldSize() == 1) {
    BOOST_TEST_MESSAGE("world size 1: no second rank to disagree with (covered under mpiexec -n 2 and -n 4)");
    return;
  }
  fsdp::FSDP model(std::make_shared<WrongWorldSize>(group));
  BOOST_CHECK_THROW(model.RegisterUnit("layer1", Mlp::Layer1()), mlframework::ArgumentError);
  BOOST_CHECK_EQUAL(model.UnitCount(), 0u);
  // A state blob of another world size is refused on every rank.
  fsdp::FSDP local(dist::MakeLocalProcessGroup());
  local.RegisterUnit("layer1", Mlp::Layer1());
  fsdp::FSDP sharded(group);
  sharded.RegisterUnit("layer1", Mlp::Layer1());
  BOOST_CHECK_THROW(sharded.LoadStateDict(local.StateDict()), mlframework::ArgumentError);
  BOOST_CHECK_THROW(local.LoadStateDict(sharded.StateDict()), mlframework::ArgumentError);
}

BOOST_AUTO_TEST_CASE(MismatchedUnitShapesFailOnEveryRank) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  const bool first = group->Rank() == 0;
  // Same element count, transposed shape on rank 0 only (only detectable with 2+ ranks).
  if (group->WorldSize() > 1) {
    BOOST_CHECK_THROW(
        model.RegisterUnit("w", {{"weight", Zeros(first ? mlframework::Shape{4, 6} : mlframework::Shape{6, 4})}}),
        mlframework::ArgumentError);
    BOOST_CHECK_THROW(model.RegisterUnit("w", {{"weight", Zeros({4, first ? 6u : 5u})}}), mlframework::ArgumentError);
    BOOST_CHECK_THROW(model.RegisterUnit("w", {{first ? "weight" : "kernel", Zeros({4, 6})}}),
                      mlframework::ArgumentError);
  }
  // The failed registrations left nothing behind: the same name registers fine now.
  model.RegisterUnit("w", {{"weight", Zeros({4, 6})}});
  BOOST_CHECK_EQUAL(model.UnitCount(), 1u);
  BOOST_CHECK_THROW(model.RegisterUnit("w", {{"weight", Zeros({4, 6})}}), mlframework::ArgumentError);
}

// Ranks built with different FSDPConfigs would gather and reduce shards of different sizes or
// dtypes, or one rank would skip a gather the others run: the first RegisterUnit() refuses it
// on every rank, naming the config, before any collective of the unit.
BOOST_AUTO_TEST_CASE(ConfigsThatDifferBetweenRanksFailOnEveryRank) {
  auto group = mlfw_test::WorldGroup();
  if (group->WorldSize() == 1) {
    BOOST_TEST_MESSAGE("world size 1: no second rank to disagree with (covered under mpiexec -n 2 and -n 4)");
    return;
  }
  const bool first = group->Rank() == 0;
  using mlframework::DataType;
  const std::vector<std::pair<std::string, fsdp::FSDPConfig>> cases{
      {"ShardAlignment", {.ShardAlignment = first ? 4u : 1u}},
      {"Strategy FullShard/ShardGradOp",
       {.Strategy = first ? fsdp::ShardingStrategy::FullShard : fsdp::ShardingStrategy::ShardGradOp}},
      {"Strategy FullShard/NoShard",
       {.Strategy = first ? fsdp::ShardingStrategy::FullShard : fsdp::ShardingStrategy::NoShard}},
      {"ParamDType", {.ParamDType = first ? DataType::Float32 : DataType::BFloat16}},
      {"ReduceDType", {.ReduceDType = first ? DataType::Float32 : DataType::Float16}},
      {"Wire", {.Wire = first ? fsdp::GradientWire::ReduceDType : fsdp::GradientWire::Float8Blocks}},
  };
  for (const auto& [what, config] : cases) {
    BOOST_TEST_CONTEXT(what) {
      fsdp::FSDP model(group, config);
      try {
        model.RegisterUnit("layer2", Mlp::Layer2());
        BOOST_ERROR("rank " << group->Rank() << ": a unit was registered over ranks with different configs");
      } catch (const mlframework::ArgumentError& error) {
        BOOST_TEST(error.Parameter() == "config");
        BOOST_TEST(std::string(error.what()).find("disagree") != std::string::npos, error.what());
      }
      BOOST_TEST(model.UnitCount() == 0u);
    }
  }
}

BOOST_AUTO_TEST_CASE(GatherTwiceAndReduceBeforeGather) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  auto& unit = model.RegisterUnit("layer1", Mlp::Layer1());
  BOOST_CHECK_THROW(unit.ReduceGradients(Mlp::Layer1()), mlframework::InvalidOperationError);
  BOOST_CHECK(!unit.LocalGradient());
  BOOST_CHECK_THROW(unit.Release(), mlframework::InvalidOperationError);
  unit.Gather();
  BOOST_CHECK_THROW(unit.Gather(), mlframework::InvalidOperationError);
  BOOST_CHECK(unit.IsGathered());
  // A gradient of the wrong shape on one rank only: every rank throws.
  auto gradients = Mlp::Layer1();
  if (group->Rank() == group->WorldSize() - 1) gradients["bias"] = Zeros({3});
  BOOST_CHECK_THROW(unit.ReduceGradients(gradients), mlframework::ArgumentError);
  BOOST_CHECK_THROW(unit.ReduceGradients({}), mlframework::ArgumentError);
  unit.ReduceGradients(Mlp::Layer1());
  BOOST_CHECK(unit.LocalGradient());
  unit.Release();
  BOOST_CHECK(!unit.IsGathered());
}

BOOST_AUTO_TEST_CASE(EmptyParameterAndTinyUnit) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  try {
    model.RegisterUnit("bad", {{"weight", Zeros({4, 0})}, {"bias", Zeros({4})}});
    BOOST_ERROR("a parameter of size 0 was accepted");
  } catch (const mlframework::ArgumentError& error) {
    BOOST_CHECK_EQUAL(error.Parameter(), "parameters[weight]");
  }
  BOOST_CHECK_THROW(model.RegisterUnit("none", {}), mlframework::ArgumentError);
  BOOST_CHECK_THROW(model.RegisterUnit("null", {{"weight", nullptr}}), mlframework::ArgumentNullError);
  BOOST_CHECK_THROW(model.RegisterUnit("", {{"weight", Zeros({4})}}), mlframework::ArgumentError);
  // A unit with fewer elements than ranks cannot be sharded.
  if (group->WorldSize() > 1) {
    BOOST_CHECK_THROW(model.RegisterUnit("tiny", {{"scale", Zeros({1})}}), mlframework::ArgumentError);
    fsdp::FSDP replicated(group, {.Strategy = fsdp::ShardingStrategy::NoShard});
    BOOST_CHECK_NO_THROW(replicated.RegisterUnit("tiny", {{"scale", Zeros({1})}}));
  } else {
    BOOST_CHECK_NO_THROW(model.RegisterUnit("tiny", {{"scale", Zeros({1})}}));
  }
  BOOST_CHECK_THROW(fsdp::FSDP(nullptr), mlframework::ArgumentNullError);
  BOOST_CHECK_THROW(fsdp::FSDP(group, {.ParamDType = static_cast<mlframework::DataType>(42)}),
                    mlframework::ArgumentError);
}

BOOST_AUTO_TEST_CASE(StepNeedsGradientsAndReleasedUnits) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  auto& unit = model.RegisterUnit("layer1", Mlp::Layer1());
  mlframework::optimizers::SGD sgd(model.ShardedParameters());
  BOOST_CHECK_THROW(model.Step(sgd), mlframework::InvalidOperationError);  // no gradients
  unit.Gather();
  unit.ReduceGradients(Mlp::Layer1());
  BOOST_CHECK_THROW(model.Step(sgd), mlframework::InvalidOperationError);  // still gathered
  BOOST_CHECK_THROW(model.SetParamDType(mlframework::DataType::Float16), mlframework::InvalidOperationError);
  unit.Release();
  BOOST_CHECK_NO_THROW(model.Step(sgd));
  // A blob corrupted on rank 0 only: every rank refuses it, nothing changes.
  auto blob = model.StateDict();
  const auto before = model.FullParameters();
  if (group->Rank() == 0) blob[blob.size() / 2] ^= std::byte{0x5a};
  BOOST_CHECK_THROW(model.LoadStateDict(blob), mlframework::ArgumentError);
  BOOST_CHECK(model.FullParameters().at("layer1.weight")->ToFloatVector() ==
              before.at("layer1.weight")->ToFloatVector());
}

// SetParamDType() on one rank only: the next gather is refused on every rank (it would gather
// 16-bit words on one rank and 32-bit ones on the others), and works once the ranks agree again.
BOOST_AUTO_TEST_CASE(ParamDTypeSetOnOneRankOnlyIsRefusedByTheGather) {
  auto group = mlfw_test::WorldGroup();
  if (group->WorldSize() < 2) return;
  fsdp::FSDP model(group);
  auto& unit = model.RegisterUnit("layer1", Mlp::Layer1());
  if (group->Rank() == 1) model.SetParamDType(mlframework::DataType::Float16);
  BOOST_CHECK_THROW(unit.Gather(), mlframework::ArgumentError);
  BOOST_TEST(!unit.IsGathered());
  BOOST_CHECK_THROW(unit.GatherAsync(), mlframework::ArgumentError);
  BOOST_TEST(!unit.IsGatherInFlight());
  model.SetParamDType(mlframework::DataType::Float16);
  unit.Gather();
  BOOST_TEST((unit.GatheredParameter()->GetDataType() == mlframework::DataType::Float16));
  unit.Release();
}

// A step refused on another rank leaves this rank's optimizer as it was: no gradients handed to
// it, no element offsets set, no update.
BOOST_AUTO_TEST_CASE(StepRefusedOnAnotherRankLeavesTheOptimizerAlone) {
  auto group = mlfw_test::WorldGroup();
  if (group->WorldSize() == 1) {
    BOOST_TEST_MESSAGE("world size 1: no other rank to refuse (covered under mpiexec -n 2 and -n 4)");
    return;
  }
  const bool last = group->Rank() == group->WorldSize() - 1;
  fsdp::FSDP model(group);
  auto& unit = model.RegisterUnit("layer1", Mlp::Layer1());
  const auto reduce = [&] {
    unit.Gather();
    unit.ReduceGradients(Mlp::Layer1());
    unit.Release();
  };
  reduce();
  // The library's SGD; on the last rank one built over a parameter of another shape, whose
  // SetGradients() refuses the unit's gradient.
  mlframework::optimizers::SGD sgd(last ? GradientMap{{"layer1", Zeros({3})}} : model.ShardedParameters());
  try {
    model.Step(sgd);
    BOOST_ERROR("a step with a mismatched optimizer went ahead");
  } catch (const mlframework::ArgumentError& error) {
    if (last) BOOST_TEST(error.Parameter() == "optimizer", error.what());
  }
  BOOST_TEST(sgd.GetGradients().empty(), "rank " << group->Rank() << ": the refused step set the SGD's gradients");
  BOOST_TEST(unit.LocalGradient() != nullptr);
  // A user's optimizer whose SetGradients() refuses on the last rank only.
  RecordingOptimizer recording(model.ShardedParameters());
  recording.refuse = last;
  BOOST_CHECK_THROW(model.Step(recording), mlframework::ArgumentError);
  BOOST_TEST(recording.GetGradients().empty(),
             "rank " << group->Rank() << ": the refused step left its gradients in the optimizer");
  BOOST_TEST(recording.offset_calls == 0,
             "rank " << group->Rank() << ": the refused step set the optimizer's element offsets");
  BOOST_TEST(recording.steps == 0);
  // Accepted everywhere, the same call goes through.
  recording.refuse = false;
  BOOST_CHECK_NO_THROW(model.Step(recording));
  BOOST_TEST(recording.steps == 1);
  BOOST_TEST(recording.offset_calls == 1);
  BOOST_TEST(recording.GetGradients().size() == 1u);
}

// LoadStateDict() while a unit is gathered, is being gathered, has a gradient reduction in flight
// or holds gradients accumulated without sync: refused on every rank with the shards unchanged,
// as LoadShardedCheckpoint() refuses. Loaded anyway, a gather in flight reads the shard while it
// is overwritten (and hands out the parameters of before the load), and a gradient of the old
// model would be applied to the loaded one.
BOOST_AUTO_TEST_CASE(LoadStateDictRefusesGathersAndGradientsInFlight) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP saved(group);
  saved.RegisterUnit("layer1", {{"weight", Zeros({Mlp::kHidden, Mlp::kIn})}, {"bias", Zeros({Mlp::kHidden})}});
  const auto blob = saved.StateDict();  // the same layout, other values
  fsdp::FSDP model(group);
  auto& unit = model.RegisterUnit("layer1", Mlp::Layer1());
  const std::vector<float> before = unit.LocalShard()->ToFloatVector();
  const auto refused = [&](const std::string& what) {
    BOOST_TEST_CONTEXT(what) {
      try {
        model.LoadStateDict(blob);
        BOOST_ERROR("the load went ahead");
      } catch (const mlframework::InvalidOperationError& error) {
        BOOST_TEST(std::string(error.what()).find("'layer1'") != std::string::npos, error.what());
      }
      BOOST_TEST(unit.LocalShard()->ToFloatVector() == before, boost::test_tools::per_element());
    }
  };
  unit.Gather();
  refused("a gathered unit");
  unit.Release();
  unit.GatherAsync();
  refused("a gather in flight");
  unit.WaitGather();
  unit.ReduceGradientsAsync(Mlp::Layer1());
  unit.Release();
  refused("a reduction in flight");
  unit.WaitReduce();
  model.ZeroGrad();
  model.SetRequiresGradientSync(false);
  unit.Gather();
  unit.ReduceGradients(Mlp::Layer1());
  unit.Release();
  refused("gradients accumulated without sync");
  model.ZeroGrad();
  model.SetRequiresGradientSync(true);
  BOOST_CHECK_NO_THROW(model.LoadStateDict(blob));
  BOOST_TEST(unit.LocalShard()->ToFloatVector() != before);
}

BOOST_AUTO_TEST_SUITE_END()
