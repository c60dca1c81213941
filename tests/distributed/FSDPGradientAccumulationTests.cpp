// Gradient accumulation without communication (FSDP::SetRequiresGradientSync): micro-batches
// without sync sum locally and communicate nothing; the last one reduces the sum once, with the
// very bits of one reduction of that sum, on 1, 2 or 4 ranks, for every strategy and reduce dtype.
// Sharded accumulation (FSDPConfig / UnitPrecision::ShardedAccumulation): every micro-batch is
// reduced into the FP32 gradient shard, no unsharded accumulator is held, and the result is the
// unsharded accumulation's (the same bits where the FP32 sums are exact, and on one rank; within
// the rounding of the other summation order otherwise); an overflow survives either way.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/SGD.hpp>

#include "distributed/DistributedTestUtil.hpp"

namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlframework::DataType;
using mlframework::GradientMap;
using mlframework::Shape;

namespace {

constexpr int kMicroBatches = 4;
constexpr float kInfinity = std::numeric_limits<float>::infinity();

// Counts every collective it forwards.
class CountingGroup final : public dist::IProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<dist::IProcessGroup> inner) : inner_(std::move(inner)) {}
  int Rank() const noexcept override { return inner_->Rank(); }
  int WorldSize() const noexcept override { return inner_->WorldSize(); }
  std::string_view BackendName() const noexcept override { return inner_->BackendName(); }
  void AllGather(const mlframework::ITensor& i, mlframework::ITensor& o) override {
    ++calls;
    inner_->AllGather(i, o);
  }
  void ReduceScatter(const mlframework::ITensor& i, mlframework::ITensor& o, dist::ReduceOp op) override {
    ++calls;
    inner_->ReduceScatter(i, o, op);
  }
  void AllReduce(mlframework::ITensor& t, dist::ReduceOp op) override {
    ++calls;
    inner_->AllReduce(t, op);
  }
  void Broadcast(mlframework::ITensor& t, int root) override {
    ++calls;
    inner_->Broadcast(t, root);
  }
  void Barrier() override {
    ++calls;
    inner_->Barrier();
  }
  void AllReduceHost(std::span<double> v, dist::ReduceOp op) override {
    ++calls;
    inner_->AllReduceHost(v, op);
  }
  using IProcessGroup::AllReduceHost;
  void Abort(const std::string& m) noexcept override { inner_->Abort(m); }

  int calls = 0;

 private:
  std::shared_ptr<dist::IProcessGroup> inner_;
};

// Two parameters whose 38 elements need padding on 4 ranks.
const Shape kWeight{2, 15};
const Shape kBias{8};

GradientMap Parameters() { return {{"weight", mlframework::Zeros(kWeight)}, {"bias", mlframework::Zeros(kBias)}}; }

// Micro-batch @p micro's gradient on @p rank: values FP32 sums round differently in any other order.
std::vector<float> Values(std::size_t count, int micro, int rank, float salt) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = salt + 0.1f * static_cast<float>(micro + 1) + 0.013f * static_cast<float>(rank) +
                1e-4f * static_cast<float>(i) * static_cast<float>(micro + 3);
  }
  return values;
}

GradientMap Gradients(int micro, int rank) {
  return {{"weight", mlframework::FromVector(Values(30, micro, rank, 1.0f), kWeight)},
          {"bias", mlframework::FromVector(Values(8, micro, rank, -3.0f), kBias)}};
}

// The FP32 sum of the micro-batches, added in the order the unit adds them.
GradientMap SumOfMicroBatches(int rank) {
  std::vector<float> weight = Values(30, 0, rank, 1.0f);
  std::vector<float> bias = Values(8, 0, rank, -3.0f);
  for (int micro = 1; micro < kMicroBatches; ++micro) {
    const std::vector<float> w = Values(30, micro, rank, 1.0f);
    const std::vector<float> b = Values(8, micro, rank, -3.0f);
    for (std::size_t i = 0; i < w.size(); ++i) weight[i] += w[i];
    for (std::size_t i = 0; i < b.size(); ++i) bias[i] += b[i];
  }
  return {{"weight", mlframework::FromVector(weight, kWeight)}, {"bias", mlframework::FromVector(bias, kBias)}};
}

// Micro-batch @p micro's gradient on @p rank in multiples of 2^-6 below 1 in magnitude: every
// FP32 sum of up to 16 of them (4 micro-batches on 4 ranks) is exact, in any order.
std::vector<float> ExactValues(std::size_t count, int micro, int rank, std::size_t salt) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t k =
        (i * 7) + (static_cast<std::size_t>(micro) * 13) + (static_cast<std::size_t>(rank) * 5) + salt;
    values[i] = (static_cast<float>(k % 97) - 48.0f) / 64.0f;
  }
  return values;
}

// One unit's micro-batch gradients, exact (ExactValues) or not (Values), by flat index.
std::vector<float> FlatValues(bool exact, int micro, int rank) {
  std::vector<float> weight = exact ? ExactValues(30, micro, rank, 0) : Values(30, micro, rank, 1.0f);
  const std::vector<float> bias = exact ? ExactValues(8, micro, rank, 3) : Values(8, micro, rank, -3.0f);
  weight.insert(weight.end(), bias.begin(), bias.end());
  return weight;
}

GradientMap GradientsOf(const std::vector<float>& flat) {
  return {{"weight", mlframework::FromVector(std::vector<float>(flat.begin(), flat.begin() + 30), kWeight)},
          {"bias", mlframework::FromVector(std::vector<float>(flat.begin() + 30, flat.end()), kBias)}};
}

// Runs kMicroBatches micro-batches (sync on the last only) through @p unit of @p model and
// checks, after each one without sync, how it was held: under sharded accumulation reduced into
// the gradient shard with no more pool memory in use than a gather leaves; otherwise summed
// locally in an unsharded accumulator of at least PaddedSize() floats on top of that.
void Accumulate(fsdp::FSDP& model, fsdp::FSDPShardingUnit& unit, bool exact, int rank) {
  const bool sharded = unit.ShardedAccumulation();
  // What a gather leaves in use without any gradient: the buffer ShardGradOp and NoShard keep.
  unit.Gather();
  unit.Release();
  const std::size_t kept = model.BufferBytesInUse();
  for (int micro = 0; micro < kMicroBatches; ++micro) {
    const bool last = micro == kMicroBatches - 1;
    model.SetRequiresGradientSync(last);
    unit.Gather();
    unit.ReduceGradients(GradientsOf(FlatValues(exact, micro, rank)));
    unit.Release();
    if (last) continue;
    BOOST_TEST(unit.HasUnsyncedGradients() == !sharded);
    BOOST_TEST((unit.LocalGradient() != nullptr) == sharded);
    if (sharded) {
      BOOST_TEST(model.BufferBytesInUse() == kept);
    } else {
      BOOST_TEST(model.BufferBytesInUse() >= kept + (unit.PaddedSize() * sizeof(float)));
    }
  }
  BOOST_TEST(!unit.HasUnsyncedGradients());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpGradientAccumulation)

// Sharded accumulation, set on the FSDP or on the unit, against the unsharded accumulation of
// the same micro-batches, for every strategy: bit-identical where every FP32 sum is exact, and
// on one rank (the same additions in the same order); within the rounding of the two summation
// orders otherwise (each sum of n terms is off by at most (n - 1) 2^-24 times the sum of their
// magnitudes, so the two differ by at most twice that).
BOOST_AUTO_TEST_CASE(ShardedAccumulationEqualsTheUnshardedOne) {
  auto world = mlfw_test::WorldGroup();
  const int rank = world->Rank();
  const int ranks = world->WorldSize();
  for (const auto strategy :
       {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::ShardGradOp, fsdp::ShardingStrategy::NoShard}) {
    for (const bool on_unit : {false, true}) {
      for (const bool exact : {true, false}) {
        BOOST_TEST_CONTEXT("strategy " << fsdp::ToString(strategy)
                                       << (on_unit ? ", set on the unit" : ", set on the FSDP")
                                       << (exact ? ", exact sums" : ", rounded sums")) {
          fsdp::FSDP sharded_model(world, {.Strategy = strategy, .ShardedAccumulation = !on_unit});
          auto& sharded = sharded_model.RegisterUnit(
              "unit", Parameters(), on_unit ? fsdp::UnitPrecision{.ShardedAccumulation = true} : fsdp::UnitPrecision{});
          BOOST_TEST(sharded.ShardedAccumulation());
          Accumulate(sharded_model, sharded, exact, rank);

          fsdp::FSDP unsharded_model(world, {.Strategy = strategy});
          auto& unsharded = unsharded_model.RegisterUnit("unit", Parameters());
          BOOST_TEST(!unsharded.ShardedAccumulation());
          Accumulate(unsharded_model, unsharded, exact, rank);

          const std::vector<float> got = sharded.LocalGradient()->ToFloatVector();
          const std::vector<float> expected = unsharded.LocalGradient()->ToFloatVector();
          BOOST_TEST_REQUIRE(got.size() == expected.size());
          if (exact || ranks == 1) {
            BOOST_TEST(mlfw_test::SameBits(got, expected));
            continue;
          }
          const std::size_t offset = sharded.ShardOffset();
          const double terms = static_cast<double>(kMicroBatches * ranks);
          for (std::size_t i = 0; i < got.size() && offset + i < sharded.NumElements(); ++i) {
            double magnitudes = 0.0;
            for (int micro = 0; micro < kMicroBatches; ++micro) {
              for (int r = 0; r < ranks; ++r) magnitudes += std::fabs(FlatValues(false, micro, r)[offset + i]);
            }
            const double bound = 2.0 * (terms - 1.0) * 0x1p-24 * magnitudes / ranks;  // averaged
            BOOST_TEST(std::fabs(static_cast<double>(got[i]) - expected[i]) <= bound, "element " << offset + i);
          }
        }
      }
    }
  }
}

// An Inf on one rank in one micro-batch without sync reaches the overflow check on every rank,
// through every wire, whether the micro-batches are summed sharded or unsharded.
BOOST_AUTO_TEST_CASE(ShardedAccumulationKeepsAnOverflow) {
  auto group = mlfw_test::WorldGroup();
  const int rank = group->Rank();
  for (const auto wire : {fsdp::GradientWire::ReduceDType, fsdp::GradientWire::Float8Blocks}) {
    for (const bool sharded : {true, false}) {
      for (const bool poison : {false, true}) {
        BOOST_TEST_CONTEXT(fsdp::ToString(wire)
                           << (sharded ? ", sharded" : ", unsharded") << (poison ? ", Inf" : ", finite")) {
          fsdp::FSDP model(group, {.Wire = wire, .ShardedAccumulation = sharded});
          auto& unit = model.RegisterUnit("unit", Parameters());
          for (int micro = 0; micro < kMicroBatches; ++micro) {
            model.SetRequiresGradientSync(micro == kMicroBatches - 1);
            std::vector<float> flat = FlatValues(false, micro, rank);
            // In the second micro-batch of the last rank, in the last rank's shard on 4 ranks.
            if (poison && micro == 1 && rank == group->WorldSize() - 1) flat[33] = kInfinity;
            unit.Gather();
            unit.ReduceGradients(GradientsOf(flat));
            unit.Release();
          }
          bool any = mlframework::HasNonFinite(std::vector<mlframework::TensorPtr>{unit.LocalGradient()});
          any = group->AllReduceHost(any ? 1.0 : 0.0, dist::ReduceOp::Max) > 0.0;
          BOOST_TEST(any == poison);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(UnsyncedMicroBatchesReduceOnceToTheBitsOfTheirSum) {
  auto world = mlfw_test::WorldGroup();
  for (const auto strategy :
       {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::ShardGradOp, fsdp::ShardingStrategy::NoShard}) {
    for (const DataType reduce : {DataType::Float32, DataType::BFloat16, DataType::Float16}) {
      BOOST_TEST_CONTEXT("strategy " << fsdp::ToString(strategy) << ", reduce dtype "
                                     << mlframework::ToString(reduce)) {
        const fsdp::FSDPConfig config{.Strategy = strategy, .ReduceDType = reduce};
        auto counting = std::make_shared<CountingGroup>(world);
        fsdp::FSDP accumulating(counting, config);
        auto& unit = accumulating.RegisterUnit("unit", Parameters());
        for (int micro = 0; micro < kMicroBatches; ++micro) {
          const bool last = micro == kMicroBatches - 1;
          accumulating.SetRequiresGradientSync(last);
          unit.Gather();
          const int before = counting->calls;
          unit.ReduceGradients(Gradients(micro, world->Rank()));
          if (!last) {
            BOOST_TEST(counting->calls == before);  // no communication at all
            BOOST_TEST(unit.HasUnsyncedGradients());
            BOOST_TEST(unit.LocalGradient() == nullptr);
          }
          unit.Release();
        }
        BOOST_TEST(!unit.HasUnsyncedGradients());

        fsdp::FSDP once(world, config);
        auto& reference = once.RegisterUnit("unit", Parameters());
        reference.Gather();
        reference.ReduceGradients(SumOfMicroBatches(world->Rank()));
        reference.Release();
        BOOST_TEST(unit.LocalGradient()->ToFloatVector() == reference.LocalGradient()->ToFloatVector(),
                   boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(AStepWaitsForTheSyncAndAnOverflowSurvivesTheSum) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  auto& unit = model.RegisterUnit("unit", Parameters());
  mlframework::optimizers::SGD sgd(model.ShardedParameters(), {.LearningRate = 0.1f});
  model.SetRequiresGradientSync(false);
  BOOST_TEST(!model.RequiresGradientSync());
  unit.Gather();
  GradientMap poisoned = Gradients(0, group->Rank());
  if (group->Rank() == 0) {
    mlframework::backends::cpu::Elements<DataType::Float32>(*poisoned.at("bias"))[2] =
        std::numeric_limits<float>::infinity();
  }
  unit.ReduceGradients(poisoned);
  unit.Release();
  BOOST_CHECK_EXCEPTION(model.Step(sgd), mlframework::InvalidOperationError,
                        [](const mlframework::InvalidOperationError& e) {
                          return std::string(e.what()).find("without sync") != std::string::npos;
                        });
  model.SetRequiresGradientSync(true);
  unit.Gather();
  unit.ReduceGradients(Gradients(1, group->Rank()));
  unit.Release();
  // The Inf of rank 0's first micro-batch is in the reduced sum, where the overflow check looks.
  bool any = mlframework::HasNonFinite(std::vector<mlframework::TensorPtr>{unit.LocalGradient()});
  any = group->AllReduceHost(any ? 1.0 : 0.0, dist::ReduceOp::Max) > 0.0;
  BOOST_TEST(any);
  model.ZeroGrad();
}

// The norm of a step whose last micro-batch is not reduced yet would leave out the locally
// summed gradients, and clipping would scale only part of them: GradNorm() and ClipGradNorm()
// refuse on every rank, as Step() does, with the gradients unchanged.
BOOST_AUTO_TEST_CASE(TheNormWaitsForTheSync) {
  auto group = mlfw_test::WorldGroup();
  fsdp::FSDP model(group);
  auto& unit = model.RegisterUnit("unit", Parameters());
  const auto reduce = [&](int micro) {
    unit.Gather();
    unit.ReduceGradients(Gradients(micro, group->Rank()));
    unit.Release();
  };
  // A reduced shard from a first micro-batch with sync, then one summed locally.
  reduce(0);
  const std::vector<float> shard = unit.LocalGradient()->ToFloatVector();
  model.SetRequiresGradientSync(false);
  reduce(1);
  const auto refused = [](const mlframework::InvalidOperationError& e) {
    return std::string(e.what()).find("without sync") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(static_cast<void>(model.GradNorm()), mlframework::InvalidOperationError, refused);
  BOOST_CHECK_EXCEPTION(static_cast<void>(model.ClipGradNorm(1e-3f)), mlframework::InvalidOperationError, refused);
  BOOST_TEST(unit.LocalGradient()->ToFloatVector() == shard, boost::test_tools::per_element());
  model.SetRequiresGradientSync(true);
  reduce(2);
  BOOST_TEST(model.GradNorm() > 0.0);
  model.ZeroGrad();
}

BOOST_AUTO_TEST_CASE(ZeroGradDropsAnUnsyncedSumAndBadInputStaysLocal) {
  fsdp::FSDP model(mlfw_test::WorldGroup());
  auto& unit = model.RegisterUnit("unit", Parameters());
  model.SetRequiresGradientSync(false);
  unit.Gather();
  unit.ReduceGradients(Gradients(0, 0));
  BOOST_CHECK_THROW(unit.ReduceGradients({{"weight", mlframework::Zeros({3})}, {"bias", mlframework::Zeros(kBias)}}),
                    mlframework::ArgumentError);
  unit.Release();
  BOOST_TEST(unit.HasUnsyncedGradients());
  model.ZeroGrad();
  BOOST_TEST(!unit.HasUnsyncedGradients());
  BOOST_CHECK_THROW(unit.ReduceGradients(Gradients(0, 0)), mlframework::InvalidOperationError);  // not gathered
}

BOOST_AUTO_TEST_SUITE_END()
