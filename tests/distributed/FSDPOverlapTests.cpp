// Overlapped FSDP: the units' asynchronous Gather/ReduceGradients and the hook-driven prefetch
// schedule give the very bits of the serial run (every strategy, parameter and reduce dtype, on
// 1, 2 and 4 ranks), and misuse throws on every rank without a hang.
#include <algorithm>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/SGD.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace fsdp = mlframework::distributed::fsdp;
using mlframework::DataType;
using mlframework::GradientMap;
using mlframework::Shape;
using mlframework::TensorPtr;
using mlframework::distributed::CollectiveRequestPtr;
using mlframework::distributed::ReduceOp;

namespace {

constexpr std::size_t kUnits = 7;
constexpr int kOverlapSteps = 3;

// Unit i: unit 0 is one FP32 parameter of 64 elements (reduced straight from the framework's
// tensor on 1, 2 and 4 ranks), the others two parameters of odd sizes (padded).
GradientMap UnitParameters(std::size_t i) {
  const auto values = [i](std::size_t n, float salt) {
    std::vector<float> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = 0.5f * std::sin(0.3f * static_cast<float>(k + 7 * i) + salt);
    return v;
  };
  if (i == 0) return {{"w", mlframework::FromVector(values(64, 0.1f), {8, 8})}};
  const std::size_t rows = 3 + i;
  return {{"weight", mlframework::FromVector(values(rows * 5, 0.2f), {rows, 5})},
          {"bias", mlframework::FromVector(values(rows, 0.9f), {rows})}};
}

// A stand-in for unit i's backward: gradients that depend on the gathered parameters, the
// step, the rank and the micro-batch, so any reordering or stale buffer changes the bits.
GradientMap Backward(const fsdp::FSDPShardingUnit& unit, int step, int rank, int micro) {
  GradientMap gradients;
  for (const auto& [name, parameter] : unit.Parameters()) {
    std::vector<float> g = parameter->ToFloatVector();
    for (std::size_t k = 0; k < g.size(); ++k) {
      g[k] =
          std::sin(3.0f * g[k] + 0.1f * static_cast<float>(step + micro)) * (1.0f + 0.25f * static_cast<float>(rank)) +
          1e-3f * static_cast<float>(k % 7);
    }
    gradients.emplace(name, mlframework::FromVector(g, parameter->GetShape()));
  }
  return gradients;
}

// "u<i>" (appended: GCC 12's -Wrestrict misfires on a literal + std::to_string here).
std::string UnitName(std::size_t i) {
  std::string name = "u";
  name.append(std::to_string(i));
  return name;
}

// A group whose non-blocking collectives deliver only in Wait(): the outputs hold NaN until
// then, so any read of a result before its wait shows in the bits. The inputs are copied at the
// start (the caller may reuse them once the request is waited for, not before, but a copy makes
// a premature reuse harmless here and leaves the outputs as the only thing under test).
class DeferredGroup final : public mlframework::distributed::IProcessGroup {
 public:
  explicit DeferredGroup(std::shared_ptr<IProcessGroup> inner) : inner_(std::move(inner)) {}
  int Rank() const noexcept override { return inner_->Rank(); }
  int WorldSize() const noexcept override { return inner_->WorldSize(); }
  std::string_view BackendName() const noexcept override { return "deferred"; }
  void AllGather(const mlframework::ITensor& i, mlframework::ITensor& o) override { inner_->AllGather(i, o); }
  void ReduceScatter(const mlframework::ITensor& i, mlframework::ITensor& o, ReduceOp op) override {
    inner_->ReduceScatter(i, o, op);
  }
  void AllReduce(mlframework::ITensor& t, ReduceOp op) override { inner_->AllReduce(t, op); }
  void Broadcast(mlframework::ITensor& t, int root) override { inner_->Broadcast(t, root); }
  void Barrier() override { inner_->Barrier(); }
  void AllReduceHost(std::span<double> v, ReduceOp op) override { inner_->AllReduceHost(v, op); }
  using IProcessGroup::AllReduceHost;
  void Abort(const std::string& m) noexcept override { inner_->Abort(m); }

  CollectiveRequestPtr AllGatherAsync(const mlframework::ITensor& input, mlframework::ITensor& output) override {
    TensorPtr copy = Snapshot(input);
    Poison(output);
    return Defer([this, copy, &output] { inner_->AllGather(*copy, output); });
  }
  CollectiveRequestPtr ReduceScatterAsync(const mlframework::ITensor& input, mlframework::ITensor& output,
                                          ReduceOp op) override {
    TensorPtr copy = Snapshot(input);
    Poison(output);
    return Defer([this, copy, &output, op] { inner_->ReduceScatter(*copy, output, op); });
  }
  CollectiveRequestPtr AllReduceAsync(mlframework::ITensor& tensor, ReduceOp op) override {
    TensorPtr copy = Snapshot(tensor);
    Poison(tensor);
    return Defer([this, copy, &tensor, op] {
      tensor.CopyFromFloats(copy->ToFloatVector());
      inner_->AllReduce(tensor, op);
    });
  }

  int started = 0;

 private:
  class Request final : public mlframework::distributed::CollectiveRequest {
   public:
    explicit Request(std::function<void()> deliver) : deliver_(std::move(deliver)) {}
    ~Request() override { Wait(); }
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;
    bool Test() override { return done_; }
    void Wait() override {
      if (done_) return;
      done_ = true;
      deliver_();
    }

   private:
    std::function<void()> deliver_;
    bool done_ = false;
  };
  static TensorPtr Snapshot(const mlframework::ITensor& t) {
    return mlframework::FromVector(t.ToFloatVector(), t.GetShape(), t.GetDataType());
  }
  static void Poison(mlframework::ITensor& t) {
    t.CopyFromFloats(std::vector<float>(t.Size(), std::numeric_limits<float>::quiet_NaN()));
  }
  CollectiveRequestPtr Defer(std::function<void()> deliver) {
    ++started;
    return std::make_unique<Request>(std::move(deliver));
  }
  std::shared_ptr<IProcessGroup> inner_;
};

enum class Schedule { Serial, AsyncUnits, Hooks };

// kOverlapSteps steps of SGD over kUnits units (with @p micro_batches micro-batches per step, the
// earlier ones without gradient sync), driven by @p schedule; returns the full parameters.
std::vector<std::vector<float>> Train(const fsdp::FSDPConfig& config, Schedule schedule,
                                      fsdp::PrefetchPolicy prefetch = {}, int micro_batches = 1,
                                      std::shared_ptr<mlframework::distributed::IProcessGroup> group = nullptr) {
  if (!group) group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group, config);
  for (std::size_t i = 0; i < kUnits; ++i) model.RegisterUnit(UnitName(i), UnitParameters(i));
  mlframework::optimizers::SGD sgd(model.ShardedParameters(), {.LearningRate = 0.05f, .Momentum = 0.9f});
  model.SetPrefetch(prefetch);
  const int rank = group->Rank();
  for (int step = 0; step < kOverlapSteps; ++step) {
    for (int micro = 0; micro < micro_batches; ++micro) {
      model.SetRequiresGradientSync(micro == micro_batches - 1);
      // Forward: the parameters are read (the gradients below read them again in backward).
      for (std::size_t i = 0; i < kUnits; ++i) {
        if (schedule == Schedule::Hooks) {
          model.PreForward(i);
          static_cast<void>(model.Unit(i).Parameters());
          model.PostForward(i);
        } else if (schedule == Schedule::AsyncUnits) {
          model.Unit(i).GatherAsync();
          model.Unit(i).WaitGather();
          model.Unit(i).Release();
        } else {
          model.Unit(i).Gather();
          model.Unit(i).Release();
        }
      }
      for (std::size_t i = kUnits; i-- > 0;) {
        fsdp::FSDPShardingUnit& unit = model.Unit(i);
        if (schedule == Schedule::Hooks) {
          model.PreBackward(i);
          model.PostBackward(i, Backward(unit, step, rank, micro));
        } else if (schedule == Schedule::AsyncUnits) {
          unit.GatherAsync();
          unit.WaitGather();
          unit.ReduceGradientsAsync(Backward(unit, step, rank, micro));
          unit.Release();  // allowed with the reduction in flight
          unit.WaitReduce();
        } else {
          unit.Gather();
          unit.ReduceGradients(Backward(unit, step, rank, micro));
          unit.Release();
        }
      }
      if (schedule == Schedule::Hooks) model.FinishBackward();
    }
    model.Step(sgd);
  }
  std::vector<std::vector<float>> result;
  for (const auto& [name, tensor] : model.FullParameters()) result.push_back(tensor->ToFloatVector());
  return result;
}

void CheckSame(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  BOOST_TEST_REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i] == b[i], boost::test_tools::per_element());
}

// Throws the same InvalidOperationError on every rank, mentioning @p text.
void ExpectInvalid(const std::function<void()>& call, const std::string& text) {
  BOOST_CHECK_EXCEPTION(call(), mlframework::InvalidOperationError, [&](const mlframework::InvalidOperationError& e) {
    const bool found = std::string(e.what()).find(text) != std::string::npos;
    if (!found) BOOST_TEST_MESSAGE("message: " << e.what());
    return found;
  });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpOverlap)

BOOST_AUTO_TEST_CASE(AsyncUnitsGiveTheBitsOfTheBlockingCalls) {
  for (const auto strategy :
       {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::ShardGradOp, fsdp::ShardingStrategy::NoShard}) {
    for (const DataType param : {DataType::Float32, DataType::BFloat16, DataType::Float16}) {
      for (const DataType reduce : {DataType::Float32, DataType::BFloat16}) {
        BOOST_TEST_CONTEXT(fsdp::ToString(strategy) << ", params " << mlframework::ToString(param) << ", reduce "
                                                    << mlframework::ToString(reduce)) {
          const fsdp::FSDPConfig config{.Strategy = strategy, .ParamDType = param, .ReduceDType = reduce};
          CheckSame(Train(config, Schedule::AsyncUnits), Train(config, Schedule::Serial));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(HybridShardAsyncAndHooksGiveTheBitsOfTheSerialRun) {
  // Shard groups of half the ranks (2 groups of 2 on 4 ranks), or one group of one rank.
  const int world = mlfw_test::WorldGroup()->WorldSize();
  const fsdp::FSDPConfig config{.Strategy = fsdp::ShardingStrategy::HybridShard,
                                .ParamDType = DataType::BFloat16,
                                .ReduceDType = DataType::Float32,
                                .ShardGroupSize = world > 1 ? world / 2 : 1};
  const auto serial = Train(config, Schedule::Serial);
  CheckSame(Train(config, Schedule::AsyncUnits), serial);
  CheckSame(Train(config, Schedule::Hooks, {.Forward = true, .Backward = true}), serial);
}

BOOST_AUTO_TEST_CASE(PrefetchingHooksGiveTheBitsOfTheSerialRun) {
  for (const auto strategy : {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::NoShard}) {
    for (const DataType reduce : {DataType::Float32, DataType::Float16}) {
      BOOST_TEST_CONTEXT(fsdp::ToString(strategy) << ", reduce " << mlframework::ToString(reduce)) {
        const fsdp::FSDPConfig config{.Strategy = strategy, .ParamDType = DataType::BFloat16, .ReduceDType = reduce};
        const auto serial = Train(config, Schedule::Serial);
        CheckSame(Train(config, Schedule::Hooks, {.Forward = true, .Backward = true}), serial);
        CheckSame(Train(config, Schedule::Hooks, {.Forward = true}), serial);
        CheckSame(Train(config, Schedule::Hooks, {}), serial);
        // Gradient accumulation through the same hooks: 3 micro-batches, one reduction.
        CheckSame(Train(config, Schedule::Hooks, {.Forward = true, .Backward = true}, 3),
                  Train(config, Schedule::Serial, {}, 3));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(NoResultIsReadBeforeItsWait) {
  for (const auto strategy :
       {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::ShardGradOp, fsdp::ShardingStrategy::NoShard}) {
    for (const DataType reduce : {DataType::Float32, DataType::BFloat16}) {
      BOOST_TEST_CONTEXT(fsdp::ToString(strategy) << ", reduce " << mlframework::ToString(reduce)) {
        const fsdp::FSDPConfig config{.Strategy = strategy, .ParamDType = DataType::BFloat16, .ReduceDType = reduce};
        auto deferred = std::make_shared<DeferredGroup>(mlfw_test::WorldGroup());
        CheckSame(Train(config, Schedule::Hooks, {.Forward = true, .Backward = true}, 2, deferred),
                  Train(config, Schedule::Serial, {}, 2));
        CheckSame(Train(config, Schedule::AsyncUnits, {}, 1, deferred), Train(config, Schedule::Serial));
        BOOST_TEST(deferred->started > 0);  // the asynchronous forms were used
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(HooksKeepAtMostTwoUnitsGathered) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group, {.ParamDType = DataType::BFloat16});
  for (std::size_t i = 0; i < kUnits; ++i) model.RegisterUnit(UnitName(i), UnitParameters(i));
  model.SetPrefetch({.Forward = true, .Backward = true});
  BOOST_TEST(model.Prefetch().Forward);
  const auto gathered_or_in_flight = [&] {
    std::size_t count = 0;
    for (std::size_t i = 0; i < kUnits; ++i) {
      count += model.Unit(i).IsGathered() || model.Unit(i).IsGatherInFlight() ? 1 : 0;
    }
    return count;
  };
  for (std::size_t i = 0; i < kUnits; ++i) {
    model.PreForward(i);
    BOOST_TEST(model.Unit(i).IsGathered());
    if (i + 1 < kUnits) BOOST_TEST(model.Unit(i + 1).IsGatherInFlight());
    BOOST_TEST(gathered_or_in_flight() <= 2u);
    model.PostForward(i);
  }
  BOOST_TEST(gathered_or_in_flight() == 1u);  // the last unit, kept for its backward
  std::size_t reductions_in_flight = 0;
  for (std::size_t i = kUnits; i-- > 0;) {
    model.PreBackward(i);
    if (i > 0) BOOST_TEST(model.Unit(i - 1).IsGatherInFlight());
    BOOST_TEST(gathered_or_in_flight() <= 2u);
    model.PostBackward(i, Backward(model.Unit(i), 0, group->Rank(), 0));
    reductions_in_flight = 0;
    for (std::size_t u = 0; u < kUnits; ++u) reductions_in_flight += model.Unit(u).IsReduceInFlight() ? 1 : 0;
    BOOST_TEST(reductions_in_flight == std::min<std::size_t>(kUnits - i, 2));  // this unit's and the one before
  }
  model.FinishBackward();
  for (std::size_t u = 0; u < kUnits; ++u) BOOST_TEST(!model.Unit(u).IsReduceInFlight());
  model.ZeroGrad();
}

// With Backward prefetch the last unit stays gathered from its forward to its backward: one
// gather fewer per step (each gather and reduction is one asynchronous start here), and a
// forward without a backward leaves it gathered only until the next forward begins.
BOOST_AUTO_TEST_CASE(TheLastUnitStaysGatheredFromForwardToBackward) {
  auto group = mlfw_test::WorldGroup();
  auto counting = std::make_shared<DeferredGroup>(group);
  fsdp::FSDP model(counting, {.ParamDType = DataType::BFloat16});
  for (std::size_t i = 0; i < kUnits; ++i) model.RegisterUnit(UnitName(i), UnitParameters(i));
  mlframework::optimizers::SGD sgd(model.ShardedParameters(), {.LearningRate = 0.05f});
  model.SetPrefetch({.Forward = true, .Backward = true});
  const auto gathered_or_in_flight = [&] {
    std::size_t count = 0;
    for (std::size_t i = 0; i < kUnits; ++i) {
      count += model.Unit(i).IsGathered() || model.Unit(i).IsGatherInFlight() ? 1 : 0;
    }
    return count;
  };
  const auto forward = [&] {
    for (std::size_t i = 0; i < kUnits; ++i) {
      model.PreForward(i);
      BOOST_TEST(gathered_or_in_flight() <= 2u);
      model.PostForward(i);
    }
  };
  // Evaluation: a forward alone keeps the last unit, the next forward releases it first.
  forward();
  BOOST_TEST(model.Unit(kUnits - 1).IsGathered());
  BOOST_TEST(gathered_or_in_flight() == 1u);
  model.PreForward(0);
  BOOST_TEST(!model.Unit(kUnits - 1).IsGathered());
  BOOST_TEST(gathered_or_in_flight() == 2u);  // unit 0 and unit 1's prefetch
  model.PostForward(0);
  for (std::size_t i = 1; i < kUnits; ++i) {
    model.PreForward(i);
    model.PostForward(i);
  }
  // Training: the backward starts from the kept unit without gathering it again.
  const int before = counting->started;
  forward();
  BOOST_TEST(counting->started - before == static_cast<int>(kUnits));  // the forward's gathers
  for (std::size_t i = kUnits; i-- > 0;) {
    model.PreBackward(i);
    BOOST_TEST(gathered_or_in_flight() <= 2u);
    model.PostBackward(i, Backward(model.Unit(i), 0, group->Rank(), 0));
  }
  model.FinishBackward();
  // Per unit a forward gather and a reduction, and backward gathers for all units but the last.
  BOOST_TEST(counting->started - before == static_cast<int>(3 * kUnits - 1));
  BOOST_TEST(gathered_or_in_flight() == 0u);
  model.Step(sgd);
}

BOOST_AUTO_TEST_CASE(MisuseThrowsOnEveryRankAndLeavesTheUnitUsable) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group, {.ParamDType = DataType::BFloat16});
  auto& unit = model.RegisterUnit("u1", UnitParameters(1));
  mlframework::optimizers::SGD sgd(model.ShardedParameters(), {.LearningRate = 0.05f});

  unit.GatherAsync();
  ExpectInvalid([&] { unit.GatherAsync(); }, "being gathered");  // double gather, one in flight
  ExpectInvalid([&] { unit.Gather(); }, "being gathered");
  ExpectInvalid([&] { unit.Release(); }, "gather in flight");
  ExpectInvalid([&] { static_cast<void>(unit.Parameters()); }, "not gathered");
  ExpectInvalid([&] { model.Step(sgd); }, "still gathered");
  BOOST_TEST(unit.IsGatherInFlight());
  unit.WaitGather();
  ExpectInvalid([&] { unit.WaitGather(); }, "waited for already");  // wait twice
  BOOST_TEST(unit.IsGathered());

  unit.ReduceGradientsAsync(Backward(unit, 0, group->Rank(), 0));
  ExpectInvalid([&] { unit.ReduceGradientsAsync(Backward(unit, 0, group->Rank(), 0)); }, "reduction in flight");
  unit.Release();
  ExpectInvalid([&] { model.Step(sgd); }, "reduction in flight");  // step with a reduction in flight
  ExpectInvalid([&] { static_cast<void>(model.ClipGradNorm(1.0f)); }, "reduction in flight");
  unit.WaitReduce();
  ExpectInvalid([&] { unit.WaitReduce(); }, "no gradient reduction in flight");
  BOOST_TEST(model.ClipGradNorm(1e6f) > 0.0);
  model.Step(sgd);  // everything waited for: the step runs

  // A unit destroyed with collectives in flight completes them first (no hang, no leak).
  {
    fsdp::FSDP other(group, {.ParamDType = DataType::BFloat16});
    auto& pending = other.RegisterUnit("u2", UnitParameters(2));
    pending.GatherAsync();
  }
  BOOST_TEST(group->AllReduceHost(1.0, mlframework::distributed::ReduceOp::Sum) ==
             static_cast<double>(group->WorldSize()));
}

BOOST_AUTO_TEST_CASE(HookIndicesOutOfRangeThrow) {
  fsdp::FSDP model(mlfw_test::WorldGroup());
  model.RegisterUnit("u1", UnitParameters(1));
  BOOST_CHECK_THROW(model.PreForward(1), mlframework::ArgumentError);
  BOOST_CHECK_THROW(model.PostBackward(5, {}), mlframework::ArgumentError);
}

BOOST_AUTO_TEST_SUITE_END()
