// Gradient accumulation without communication (FSDP::SetRequiresGradientSync): micro-batches
// without sync sum locally and communicate nothing; the last one reduces the sum once, with the
// very bits of one reduction of that sum, on 1, 2 or 4 ranks, for every strategy and reduce dtype.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <cmath>
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

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpGradientAccumulation)

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
