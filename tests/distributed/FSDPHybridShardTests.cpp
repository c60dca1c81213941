// ShardingStrategy::HybridShard on the world group (1, 2 or 4 ranks; under mpiexec -n 4 as 2
// shard groups of 2 among other splits): it trains as FullShard and NoShard over all ranks do,
// bit for bit where every sum is exact, to a tolerance where only the order of the sums
// differs; it moves the bytes hybrid sharding promises in each group, communicates nothing
// while gradients accumulate, and bad configurations fail on every rank together.
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/distributed/fsdp/FSDPAmpIntegration.hpp>
#include <mlframework/optimizers/Adam.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlframework::DataType;
using mlframework::GradientMap;
using mlframework::Shape;
using mlfw_test::Mlp;
using mlfw_test::SameBits;

namespace {

// Bytes each collective moves, per kind, summed over the group and the groups split from it.
struct Traffic {
  std::map<std::string, std::size_t> bytes;  // "AllGather", "ReduceScatter", "AllReduce", ...
  int calls = 0;
};

// Forwards to a real group and counts what it moves into a Traffic of its own; the groups it
// splits count into their own Traffic (shared by every group split with the same color
// parity: the test reads "the shard group" and "the replicate group" of this rank).
class HybridCountingGroup final : public dist::IProcessGroup {
 public:
  explicit HybridCountingGroup(std::shared_ptr<dist::IProcessGroup> inner, std::shared_ptr<Traffic> traffic)
      : inner_(std::move(inner)), traffic_(std::move(traffic)) {}
  int Rank() const noexcept override { return inner_->Rank(); }
  int WorldSize() const noexcept override { return inner_->WorldSize(); }
  std::string_view BackendName() const noexcept override { return inner_->BackendName(); }
  void AllGather(const mlframework::ITensor& i, mlframework::ITensor& o) override {
    Count("AllGather", o);
    inner_->AllGather(i, o);
  }
  void ReduceScatter(const mlframework::ITensor& i, mlframework::ITensor& o, dist::ReduceOp op) override {
    Count("ReduceScatter", i);
    inner_->ReduceScatter(i, o, op);
  }
  void AllReduce(mlframework::ITensor& t, dist::ReduceOp op) override {
    Count("AllReduce", t);
    inner_->AllReduce(t, op);
  }
  void Broadcast(mlframework::ITensor& t, int root) override {
    Count("Broadcast", t);
    inner_->Broadcast(t, root);
  }
  void Barrier() override {
    ++traffic_->calls;
    inner_->Barrier();
  }
  void AllReduceHost(std::span<double> v, dist::ReduceOp op) override {
    ++traffic_->calls;
    traffic_->bytes["AllReduceHost"] += v.size() * sizeof(double);
    inner_->AllReduceHost(v, op);
  }
  using IProcessGroup::AllReduceHost;
  std::shared_ptr<dist::IProcessGroup> Split(int color, int key) override {
    auto traffic = std::make_shared<Traffic>();
    splits.push_back(traffic);
    return std::make_shared<HybridCountingGroup>(inner_->Split(color, key), traffic);
  }
  void Abort(const std::string& m) noexcept override { inner_->Abort(m); }

  std::vector<std::shared_ptr<Traffic>> splits;  // in the order Split() was called

 private:
  void Count(const char* kind, const mlframework::ITensor& tensor) {
    ++traffic_->calls;
    traffic_->bytes[kind] += tensor.Size() * mlframework::ElementSize(tensor.GetDataType());
  }
  std::shared_ptr<dist::IProcessGroup> inner_;
  std::shared_ptr<Traffic> traffic_;
};

// A group that forwards everything but Split (a user's engine that cannot split).
class NoSplitGroup final : public dist::IProcessGroup {
 public:
  explicit NoSplitGroup(std::shared_ptr<dist::IProcessGroup> inner) : inner_(std::move(inner)) {}
  int Rank() const noexcept override { return inner_->Rank(); }
  int WorldSize() const noexcept override { return inner_->WorldSize(); }
  std::string_view BackendName() const noexcept override { return "user"; }
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

// Every shard group size that divides the world size (1, 2 and 4 on 4 ranks).
std::vector<int> ShardGroupSizes(int world) {
  std::vector<int> sizes;
  for (int s = 1; s <= world; ++s) {
    if (world % s == 0) sizes.push_back(s);
  }
  return sizes;
}

fsdp::FSDPConfig Hybrid(int shard_group_size, DataType param = DataType::Float32, DataType reduce = DataType::Float32) {
  return {.Strategy = fsdp::ShardingStrategy::HybridShard,
          .ParamDType = param,
          .ReduceDType = reduce,
          .ShardGroupSize = shard_group_size};
}

struct HybridRun {
  std::vector<double> losses;
  std::vector<double> norms;
  std::vector<bool> skipped;
  GradientMap params;
};

constexpr int kHybridSteps = 8;

// Adam on the MLP, every rank on its slice of the global batch. With @p amp, an infinity on
// the last rank's layer-2 gradient at odd steps must skip the step on every rank.
HybridRun TrainMlp(const std::shared_ptr<dist::IProcessGroup>& group, const fsdp::FSDPConfig& config,
                   bool amp = false) {
  fsdp::FSDP model(group, config);
  auto& l1 = model.RegisterUnit("layer1", Mlp::Layer1());
  auto& l2 = model.RegisterUnit("layer2", Mlp::Layer2());
  mlframework::optimizers::Adam adam(model.ShardedParameters(), {.LearningRate = 0.01f});
  std::optional<fsdp::FSDPAmpIntegration> integration;
  if (amp) integration.emplace(model, fsdp::FSDPMixedPrecisionConfig{.InitialLossScale = 64.0f});
  const int n = group->WorldSize();
  HybridRun run;
  for (int step = 0; step < kHybridSteps; ++step) {
    l1.Gather();
    l2.Gather();
    const auto out = Mlp::Run(l1.Parameters(), l2.Parameters(), Mlp::RankSlice(group->Rank(), n, step));
    l1.ReduceGradients(out.layer1);
    l2.ReduceGradients(out.layer2);
    l1.Release();
    l2.Release();
    run.losses.push_back(group->AllReduceHost(out.loss, dist::ReduceOp::Sum) / n);
    bool skip = false;
    if (integration) {
      if (step % 2 == 1 && group->Rank() == n - 1) {
        mlframework::backends::cpu::Elements<DataType::Float32>(*l2.LocalGradient())[0] =
            std::numeric_limits<float>::infinity();
      }
      skip = integration->CheckOverflow(model.LocalGradients());
    }
    run.skipped.push_back(skip);
    if (skip) {
      model.ZeroGrad();
      continue;
    }
    run.norms.push_back(model.ClipGradNorm(0.5f));
    model.Step(adam);
  }
  run.params = model.FullParameters();
  return run;
}

void ExpectClose(const HybridRun& got, const HybridRun& want, double tolerance) {
  BOOST_REQUIRE_EQUAL(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < got.losses.size(); ++i) {
    BOOST_CHECK_CLOSE_FRACTION(got.losses[i], want.losses[i], tolerance);
  }
  BOOST_REQUIRE_EQUAL(got.norms.size(), want.norms.size());
  for (std::size_t i = 0; i < got.norms.size(); ++i) BOOST_CHECK_CLOSE_FRACTION(got.norms[i], want.norms[i], tolerance);
  BOOST_CHECK(got.skipped == want.skipped);
  for (const auto& [name, tensor] : want.params) {
    BOOST_TEST_INFO("parameter " << name);
    BOOST_CHECK_LE(mlfw_test::RelativeDifference(got.params.at(name)->ToFloatVector(), tensor->ToFloatVector()),
                   tolerance);
  }
}

// Gradients whose every sum and square is exact in FP32 and in BF16: multiples of 1/1024 below
// 1/16 in magnitude (6 significant bits), so sums of 4 ranks' values, their averages by a power
// of two and any order of summation all give the same bits.
GradientMap ExactGradients(int step, int rank, const Shape& weight, const Shape& bias) {
  auto values = [&](std::size_t count, int salt) {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) {
      const int k = static_cast<int>((i * 7 + static_cast<std::size_t>(step * 13 + rank * 5 + salt)) % 63) - 31;
      v[i] = static_cast<float>(k) / 1024.0f;
    }
    return v;
  };
  return {{"weight", mlframework::FromVector(values(weight[0] * weight[1], 1), weight)},
          {"bias", mlframework::FromVector(values(bias[0], 2), bias)}};
}

// kHybridSteps of Adam on exact gradients; the full parameters and the gradient norms.
HybridRun TrainExact(const std::shared_ptr<dist::IProcessGroup>& group, const fsdp::FSDPConfig& config) {
  fsdp::FSDP model(group, config);
  auto& l1 = model.RegisterUnit("layer1", Mlp::Layer1());
  auto& l2 = model.RegisterUnit("layer2", Mlp::Layer2());
  mlframework::optimizers::Adam adam(model.ShardedParameters(), {.LearningRate = 0.01f});
  HybridRun run;
  for (int step = 0; step < kHybridSteps; ++step) {
    for (auto* unit : {&l1, &l2}) {
      unit->Gather();
      const Shape& weight = unit->ParameterShape("weight");
      const Shape& bias = unit->ParameterShape("bias");
      unit->ReduceGradients(ExactGradients(step + (unit == &l2 ? 100 : 0), group->Rank(), weight, bias));
      unit->Release();
    }
    run.norms.push_back(model.GradNorm());
    model.Step(adam);
  }
  run.params = model.FullParameters();
  return run;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpHybridShard)

BOOST_AUTO_TEST_CASE(GroupsAreConsecutiveShardGroupsAndStridedReplicas) {
  auto world = mlfw_test::WorldGroup();
  const int n = world->WorldSize();
  const int rank = world->Rank();
  for (const int s : ShardGroupSizes(n)) {
    BOOST_TEST_CONTEXT("world " << n << ", shard group size " << s) {
      fsdp::FSDP model(world, Hybrid(s));
      BOOST_TEST(model.ShardGroup().WorldSize() == s);
      BOOST_TEST(model.ShardGroup().Rank() == rank % s);
      BOOST_REQUIRE(model.ReplicateGroup() != nullptr);
      BOOST_TEST(model.ReplicateGroup()->WorldSize() == n / s);
      BOOST_TEST(model.ReplicateGroup()->Rank() == rank / s);
      // Layer 1 has 90 elements: padded to a multiple of the shard group size, not of the world.
      auto& unit = model.RegisterUnit("layer1", Mlp::Layer1());
      const std::size_t padded =
          (90 + static_cast<std::size_t>(s) - 1) / static_cast<std::size_t>(s) * static_cast<std::size_t>(s);
      BOOST_TEST(unit.PaddedSize() == padded);
      BOOST_TEST(unit.ShardSize() == padded / static_cast<std::size_t>(s));
      BOOST_TEST(unit.ShardOffset() == unit.ShardSize() * static_cast<std::size_t>(rank % s));
      // The replicas hold equal shards (MAX and MIN over them are this rank's values), and the
      // shard group's parts gather back to the parameters.
      const std::vector<float> shard = unit.LocalShard()->ToFloatVector();
      std::vector<double> high(shard.begin(), shard.end());
      std::vector<double> low(shard.size());
      for (std::size_t i = 0; i < shard.size(); ++i) low[i] = -static_cast<double>(shard[i]);
      model.ReplicateGroup()->AllReduceHost(high, dist::ReduceOp::Max);
      model.ReplicateGroup()->AllReduceHost(low, dist::ReduceOp::Max);
      for (std::size_t i = 0; i < shard.size(); ++i) {
        BOOST_CHECK_EQUAL(high[i], static_cast<double>(shard[i]));
        BOOST_CHECK_EQUAL(-low[i], static_cast<double>(shard[i]));
      }
      const GradientMap params = model.FullParameters();
      for (const auto& [name, tensor] : Mlp::Layer1()) {
        BOOST_CHECK(SameBits(params.at("layer1." + name)->ToFloatVector(), tensor->ToFloatVector()));
      }
    }
  }
  fsdp::FSDP full(world);
  BOOST_TEST(&full.ShardGroup() == &full.ProcessGroup());
  BOOST_TEST(full.ReplicateGroup() == nullptr);
}

BOOST_AUTO_TEST_CASE(TrainsBitIdenticalToFullShardAndNoShardWhenSumsAreExact) {
  auto world = mlfw_test::WorldGroup();
  for (const DataType reduce : {DataType::Float32, DataType::BFloat16}) {
    const fsdp::FSDPConfig full_shard{.ReduceDType = reduce};
    const fsdp::FSDPConfig no_shard{.Strategy = fsdp::ShardingStrategy::NoShard, .ReduceDType = reduce};
    const HybridRun want = TrainExact(world, full_shard);
    const HybridRun ddp = TrainExact(world, no_shard);
    for (const int s : ShardGroupSizes(world->WorldSize())) {
      BOOST_TEST_CONTEXT("world " << world->WorldSize() << ", shard group size " << s << ", reduce "
                                  << mlframework::ToString(reduce)) {
        const HybridRun got = TrainExact(world, Hybrid(s, DataType::Float32, reduce));
        BOOST_CHECK(got.norms == want.norms);  // each shard counted once, exactly
        BOOST_CHECK(got.norms == ddp.norms);
        for (const auto& [name, tensor] : want.params) {
          BOOST_TEST_INFO("parameter " << name);
          BOOST_CHECK(SameBits(got.params.at(name)->ToFloatVector(), tensor->ToFloatVector()));
          BOOST_CHECK(SameBits(got.params.at(name)->ToFloatVector(), ddp.params.at(name)->ToFloatVector()));
        }
      }
    }
  }
}

// On real gradients the hybrid sum is (r0 + r1) + (r2 + r3) where FullShard adds r0..r3 in rank
// order: FP32 rounds differently by an ulp or so per step, hence the tolerance the other
// distributed suites use against one process.
BOOST_AUTO_TEST_CASE(TrainsAsFullShardNoShardAndOneProcessWithClippingAndOverflow) {
  auto world = mlfw_test::WorldGroup();
  for (const bool amp : {false, true}) {
    const HybridRun one = TrainMlp(dist::MakeLocalProcessGroup(), {}, amp);
    const HybridRun full_shard = TrainMlp(world, {}, amp);
    const HybridRun no_shard = TrainMlp(world, {.Strategy = fsdp::ShardingStrategy::NoShard}, amp);
    BOOST_CHECK_LT(one.losses.back(), one.losses.front());  // it trains
    for (const int s : ShardGroupSizes(world->WorldSize())) {
      BOOST_TEST_CONTEXT("world " << world->WorldSize() << ", shard group size " << s << ", amp " << amp) {
        const HybridRun got = TrainMlp(world, Hybrid(s), amp);
        ExpectClose(got, full_shard, 1e-5);
        ExpectClose(got, no_shard, 1e-5);
        ExpectClose(got, one, 1e-5);
        if (amp) {
          for (int step = 0; step < kHybridSteps; ++step) BOOST_CHECK_EQUAL(got.skipped[step], step % 2 == 1);
        }
        for (const double norm : got.norms) {
          BOOST_CHECK_EQUAL(world->AllReduceHost(norm, dist::ReduceOp::Max), norm);  // same on every rank
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(SixteenBitGatherAndReduceTrainAsFullShard) {
  auto world = mlfw_test::WorldGroup();
  const fsdp::FSDPConfig full_shard{.ParamDType = DataType::BFloat16, .ReduceDType = DataType::BFloat16};
  const HybridRun want = TrainMlp(world, full_shard);
  for (const int s : ShardGroupSizes(world->WorldSize())) {
    BOOST_TEST_CONTEXT("shard group size " << s) {
      // BF16 sums round once per combine; the hybrid sum combines in another order: BF16's
      // 2^-8 relative step, compounded over the steps.
      ExpectClose(TrainMlp(world, Hybrid(s, DataType::BFloat16, DataType::BFloat16)), want, 2e-2);
    }
  }
}

BOOST_AUTO_TEST_CASE(BytesPerStepStayInTheShardGroupButOneShardAcrossReplicas) {
  auto world = mlfw_test::WorldGroup();
  const int n = world->WorldSize();
  for (const DataType dtype : {DataType::Float32, DataType::BFloat16}) {
    // FullShard over every rank, for comparison: the whole unit goes over the world group.
    auto full_traffic = std::make_shared<Traffic>();
    fsdp::FSDP full_shard(std::make_shared<HybridCountingGroup>(world, full_traffic),
                          {.ParamDType = dtype, .ReduceDType = dtype});
    auto& full_unit = full_shard.RegisterUnit("layer1", Mlp::Layer1());
    *full_traffic = {};
    full_unit.Gather();
    full_unit.ReduceGradients(Mlp::Layer1());
    full_unit.Release();
    BOOST_TEST(full_traffic->bytes["AllGather"] == full_unit.PaddedSize() * mlframework::ElementSize(dtype));
    BOOST_TEST_MESSAGE("FullShard " << n << " ranks, " << mlframework::ToString(dtype) << ": per step "
                                    << full_traffic->bytes["AllGather"] << " B gathered and "
                                    << full_traffic->bytes["ReduceScatter"] << " B reduce-scattered over all ranks");
    for (const int s : ShardGroupSizes(n)) {
      BOOST_TEST_CONTEXT("world " << n << ", shard group size " << s << ", dtype " << mlframework::ToString(dtype)) {
        auto top = std::make_shared<Traffic>();
        auto counting = std::make_shared<HybridCountingGroup>(world, top);
        fsdp::FSDP model(counting, Hybrid(s, dtype, dtype));
        BOOST_REQUIRE_EQUAL(counting->splits.size(), 2u);
        Traffic& shard = *counting->splits[0];
        Traffic& replicate = *counting->splits[1];
        auto& unit = model.RegisterUnit("layer1", Mlp::Layer1());
        *top = {};
        unit.Gather();
        unit.ReduceGradients(Mlp::Layer1());
        unit.Release();
        const std::size_t element = mlframework::ElementSize(dtype);
        // The gather and the reduce-scatter move the padded unit inside the shard group only;
        // across the replicas goes one shard, and only when there is more than one replica.
        BOOST_TEST(shard.bytes["AllGather"] == unit.PaddedSize() * element);
        BOOST_TEST(shard.bytes["ReduceScatter"] == unit.PaddedSize() * element);
        BOOST_TEST(replicate.bytes["AllReduce"] == (n / s > 1 ? unit.ShardSize() * element : 0u));
        BOOST_TEST(replicate.bytes["AllGather"] == 0u);
        BOOST_TEST(top->bytes["AllGather"] + top->bytes["ReduceScatter"] + top->bytes["AllReduce"] == 0u);
        // What leaves the shard group (a node) is one shard: 1/S of what FullShard gathers
        // across all ranks (up to padding).
        BOOST_TEST(replicate.bytes["AllReduce"] * static_cast<std::size_t>(s) <= full_traffic->bytes["AllGather"]);
        BOOST_TEST_MESSAGE("HybridShard " << n << " ranks, shard group " << s << ", " << mlframework::ToString(dtype)
                                          << ": per step " << shard.bytes["AllGather"] << " B gathered and "
                                          << shard.bytes["ReduceScatter"] << " B reduce-scattered in the shard group, "
                                          << replicate.bytes["AllReduce"] << " B all-reduced across replicas");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(AccumulationWithoutSyncCommunicatesNothingAndReducesOnce) {
  auto world = mlfw_test::WorldGroup();
  for (const int s : ShardGroupSizes(world->WorldSize())) {
    BOOST_TEST_CONTEXT("shard group size " << s) {
      auto top = std::make_shared<Traffic>();
      auto counting = std::make_shared<HybridCountingGroup>(world, top);
      fsdp::FSDP accumulating(counting, Hybrid(s));
      fsdp::FSDP once(world, Hybrid(s));
      auto& unit = accumulating.RegisterUnit("layer1", Mlp::Layer1());
      auto& reference = once.RegisterUnit("layer1", Mlp::Layer1());
      const auto calls = [&] { return top->calls + counting->splits[0]->calls + counting->splits[1]->calls; };
      GradientMap sum = ExactGradients(0, world->Rank(), {10, 8}, {10});
      for (int micro = 0; micro < 3; ++micro) {
        const bool last = micro == 2;
        accumulating.SetRequiresGradientSync(last);
        unit.Gather();
        const int before = calls();
        const GradientMap g = ExactGradients(micro, world->Rank(), {10, 8}, {10});
        unit.ReduceGradients(g);
        if (!last) BOOST_TEST(calls() == before);  // no group communicated
        unit.Release();
        if (micro > 0) {
          for (auto& [name, tensor] : sum) {
            std::vector<float> a = tensor->ToFloatVector();
            const std::vector<float> b = g.at(name)->ToFloatVector();
            for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
            tensor = mlframework::FromVector(a, tensor->GetShape());
          }
        }
      }
      reference.Gather();
      reference.ReduceGradients(sum);
      reference.Release();
      BOOST_CHECK(SameBits(unit.LocalGradient()->ToFloatVector(), reference.LocalGradient()->ToFloatVector()));
    }
  }
}

BOOST_AUTO_TEST_CASE(StateRoundTripsAndRefusesAnotherShardGroupSize) {
  auto world = mlfw_test::WorldGroup();
  const int n = world->WorldSize();
  fsdp::FSDP model(world, Hybrid(n == 1 ? 1 : 2));
  auto& unit = model.RegisterUnit("layer1", Mlp::Layer1());
  const auto saved = model.StateDict();
  const auto before = model.FullParameters();
  mlframework::optimizers::Adam adam(model.ShardedParameters(), {.LearningRate = 0.1f});
  unit.Gather();
  unit.ReduceGradients(Mlp::Layer1());
  unit.Release();
  model.Step(adam);
  BOOST_CHECK(model.FullParameters().at("layer1.weight")->ToFloatVector() !=
              before.at("layer1.weight")->ToFloatVector());
  model.LoadStateDict(saved);
  BOOST_CHECK(model.FullParameters().at("layer1.weight")->ToFloatVector() ==
              before.at("layer1.weight")->ToFloatVector());
  if (n > 1) {
    // Shards of 2-rank groups do not fit 1-rank groups (and the reverse): refused on every rank.
    fsdp::FSDP other(world, Hybrid(1));
    other.RegisterUnit("layer1", Mlp::Layer1());
    const auto other_before = other.FullParameters();
    BOOST_CHECK_THROW(other.LoadStateDict(saved), mlframework::ArgumentError);
    BOOST_CHECK(other.FullParameters().at("layer1.weight")->ToFloatVector() ==
                other_before.at("layer1.weight")->ToFloatVector());
  }
}

BOOST_AUTO_TEST_CASE(BadConfigurationsFailOnEveryRankTogether) {
  auto world = mlfw_test::WorldGroup();
  const int n = world->WorldSize();
  const int rank = world->Rank();
  const auto make = [](const std::shared_ptr<dist::IProcessGroup>& group, const fsdp::FSDPConfig& config) {
    const fsdp::FSDP model(group, config);
  };
  // A size that does not divide the world size (3 on 1, 2 or 4 ranks; n + 1 anywhere).
  BOOST_CHECK_THROW(make(world, Hybrid(3)), mlframework::ArgumentError);
  BOOST_CHECK_THROW(make(world, Hybrid(n + 1)), mlframework::ArgumentError);
  // Missing, negative, or given to another strategy.
  BOOST_CHECK_THROW(make(world, Hybrid(0)), mlframework::ArgumentError);
  BOOST_CHECK_THROW(make(world, Hybrid(-2)), mlframework::ArgumentError);
  BOOST_CHECK_THROW(make(world, {.ShardGroupSize = 1}), mlframework::ArgumentError);
  const fsdp::FSDPConfig no_shard{.Strategy = fsdp::ShardingStrategy::NoShard, .ShardGroupSize = 2};
  BOOST_CHECK_THROW(no_shard.Validate(), mlframework::ArgumentError);
  // Only one rank's value is bad: every rank throws, none is left in a split.
  BOOST_CHECK_THROW(make(world, Hybrid(rank == n - 1 ? 0 : 1)), mlframework::ArgumentError);
  BOOST_CHECK_THROW(make(world, Hybrid(rank == 0 ? 3 : 1)), mlframework::ArgumentError);
  if (n > 1) {
    // Ranks that disagree on a size that divides for each of them.
    try {
      fsdp::FSDP disagreeing(world, Hybrid(rank == 0 ? 1 : n));
      BOOST_ERROR("ranks disagreeing on ShardGroupSize were accepted");
    } catch (const mlframework::ArgumentError& e) {
      BOOST_TEST(std::string(e.what()).find("disagree") != std::string::npos, e.what());
    }
  }
  // An engine that cannot split: InvalidOperationError on every rank.
  BOOST_CHECK_THROW(make(std::make_shared<NoSplitGroup>(world), Hybrid(1)), mlframework::InvalidOperationError);
  BOOST_CHECK_THROW(world->Split(-1, 0), mlframework::ArgumentError);
  // The ranks are still in step: a valid hybrid FSDP forms and trains after all of that.
  fsdp::FSDP model(world, Hybrid(n));
  auto& unit = model.RegisterUnit("layer2", Mlp::Layer2());
  unit.Gather();
  unit.ReduceGradients(Mlp::Layer2());
  unit.Release();
  BOOST_CHECK_GT(model.GradNorm(), 0.0);
  // A unit smaller than the shard group is refused on every rank (not only a world-size unit).
  if (n > 1) {
    fsdp::FSDP tiny(world, Hybrid(n));
    BOOST_CHECK_THROW(tiny.RegisterUnit("bias", {{"b", mlframework::Zeros({static_cast<std::size_t>(n - 1)})}}),
                      mlframework::ArgumentError);
    BOOST_CHECK_EQUAL(tiny.UnitCount(), 0u);
    fsdp::FSDP replicated(world, Hybrid(1));  // shard groups of one: any unit fits
    replicated.RegisterUnit("bias", {{"b", mlframework::Zeros({1})}});
    BOOST_CHECK_EQUAL(replicated.UnitCount(), 1u);
  }
}

BOOST_AUTO_TEST_CASE(LocalGroupSplitsIntoItself) {
  auto local = dist::MakeLocalProcessGroup();
  auto part = local->Split(0, 0);
  BOOST_REQUIRE(part != nullptr);
  BOOST_TEST(part->WorldSize() == 1);
  BOOST_TEST(part.get() != local.get());
  BOOST_CHECK_THROW(local->Split(-1, 0), mlframework::ArgumentError);
  fsdp::FSDP model(local, Hybrid(1));
  model.RegisterUnit("layer1", Mlp::Layer1());
  BOOST_TEST(model.ReplicateGroup()->WorldSize() == 1);
}

BOOST_AUTO_TEST_SUITE_END()
