// Device-resident FSDP without a GPU: the fake device backend (tests/amp/FakeDeviceBackend.hpp,
// CPU memory that reports cuda:N and counts every host synchronisation a GPU would need).
//
// 1. A training run on fake-device parameters gives bit-identical losses and parameters to
//    the same run on CPU tensors, for every sharding strategy, FP32 and FP16 parameter
//    dtypes, FP32 and BF16 reductions, with gradient accumulation and clipping.
// 2. Every unit buffer (shard, gathered buffer and its views, gradient shard) is a tensor of
//    the parameters' backend on their device.
// 3. Gather, ReduceGradients (also accumulating) and Release wait for the device zero times;
//    ClipGradNorm once (the sum of squares it all-reduces). The collectives run on a
//    process-group double that works on the tensors' memory in place, as NCCL does on a GPU.
// 4. Parameters on two devices are an ArgumentError naming the parameter and both devices.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/Adam.hpp>
#include <mlframework/optimizers/SGD.hpp>

#include "amp/FakeDeviceBackend.hpp"
#include "distributed/DistributedTestUtil.hpp"

using namespace mlframework;
namespace dist = mlframework::distributed;
namespace fsdp = mlframework::distributed::fsdp;
using mlfw_test::FakeBackend;
using mlfw_test::FakeDeviceTensor;
using mlfw_test::SyncsDuring;
using mlfw_test::UserTensor;

// Where the framework tensors without a TensorBackend claim to live: FSDP cannot allocate there.
const Device kNoBackendGpu = Device::CUDA(3);

namespace {

// The CPU tensor holding a tensor's elements: the fake tensor's inside, a CPU tensor itself.
ITensor& Memory(const ITensor& tensor) {
  if (const auto* fake = dynamic_cast<const FakeDeviceTensor*>(&tensor)) return *fake->Inner();
  return const_cast<ITensor&>(tensor);  // NOLINT: the doubles below write through it
}

// Rank 0 of a group whose `world` ranks all hold exactly what this rank holds (a mirror): the
// results are what a real group of identical ranks computes. It reads and writes the tensors'
// memory in place, never through ITensor::ToFloatVector(), as NCCL works on device memory, so
// the fake backend's count holds FSDP's own synchronisations only.
class MirrorGroup final : public dist::IProcessGroup {
 public:
  explicit MirrorGroup(int world) : world_(world) {}
  int Rank() const noexcept override { return 0; }
  int WorldSize() const noexcept override { return world_; }
  std::string_view BackendName() const noexcept override { return "mirror"; }
  void AllGather(const ITensor& input, ITensor& output) override {
    const std::vector<float> part = Memory(input).ToFloatVector();
    std::vector<float> all;
    for (int r = 0; r < world_; ++r) all.insert(all.end(), part.begin(), part.end());
    BOOST_REQUIRE_EQUAL(all.size(), output.Size());
    Memory(output).CopyFromFloats(all);
    ++collectives;
  }
  void ReduceScatter(const ITensor& input, ITensor& output, dist::ReduceOp op) override {
    const std::vector<float> all = Memory(input).ToFloatVector();
    BOOST_REQUIRE_EQUAL(all.size(), output.Size() * static_cast<std::size_t>(world_));
    std::vector<float> part(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(output.Size()));
    if (op == dist::ReduceOp::Sum) {
      for (float& v : part) v = Sum(v);
    }
    Memory(output).CopyFromFloats(part);
    ++collectives;
  }
  void AllReduce(ITensor& tensor, dist::ReduceOp op) override {
    std::vector<float> values = Memory(tensor).ToFloatVector();
    if (op == dist::ReduceOp::Sum) {
      for (float& v : values) v = Sum(v);
    }
    Memory(tensor).CopyFromFloats(values);
    ++collectives;
  }
  void Broadcast(ITensor& /*tensor*/, int /*root*/) override { ++collectives; }
  void Barrier() override {}
  void AllReduceHost(std::span<double> values, dist::ReduceOp op) override {
    if (op == dist::ReduceOp::Sum) {
      for (double& v : values) v *= world_;
    }
  }
  void Abort(const std::string& message) noexcept override { aborted = message; }

  int collectives = 0;
  std::string aborted;

 private:
  // `world` equal addends, summed in FP32 one after the other as a reduction would.
  float Sum(float v) const {
    float total = v;
    for (int r = 1; r < world_; ++r) total += v;
    return total;
  }
  int world_;
};

struct Layout {
  std::string unit;
  std::string name;
  Shape shape;
};

// Two units; 15 and 8 elements, so two ranks pad the first one.
const std::vector<Layout> kLayout = {{"l1", "b", {3}}, {"l1", "w", {4, 3}}, {"l2", "b", {2}}, {"l2", "w", {3, 2}}};

TensorPtr MakeTensor(const std::vector<float>& values, const Shape& shape, DataType dtype, bool on_device,
                     int device = 0) {
  if (on_device) return mlfw_test::FakeTensor(values, shape, dtype, device);
  return FromVector(values, shape, dtype);
}

std::vector<float> Initial(std::size_t size, int seed) {
  std::vector<float> values(size);
  for (std::size_t i = 0; i < size; ++i)
    values[i] = 0.1f * static_cast<float>((static_cast<int>(i) * 7 + seed) % 11) - 0.5f;
  return values;
}

struct ResidentOptions {
  fsdp::ShardingStrategy strategy = fsdp::ShardingStrategy::FullShard;
  DataType param_dtype = DataType::Float32;
  DataType reduce_dtype = DataType::Float32;
  bool adam = false;
  bool hooks = false;  // through FSDP's backward hooks with prefetch, units in reverse order
};

struct ResidentRun {
  std::vector<float> losses;
  std::vector<double> norms;
  std::vector<std::vector<float>> params;
  int steps_checked = 0;
};

// Per step and unit: gather, loss sum((p - t)^2) over the gathered values, gradient 2(p - t)
// in the parameter dtype reduced twice on odd steps (accumulation), release; then clip and step.
// @p real: a real process group instead of the mirror of @p world ranks.
ResidentRun Train(const ResidentOptions& options, bool on_device, int world,
                  const std::shared_ptr<dist::IProcessGroup>& real = nullptr) {
  constexpr int kResidentSteps = 4;
  auto mirror = std::make_shared<MirrorGroup>(world);
  std::shared_ptr<dist::IProcessGroup> group = mirror;
  if (real) group = real;
  fsdp::FSDP model(
      group, {.Strategy = options.strategy, .ParamDType = options.param_dtype, .ReduceDType = options.reduce_dtype});
  std::vector<std::string> units;
  for (std::size_t i = 0; i < kLayout.size(); ++i) {
    if (std::find(units.begin(), units.end(), kLayout[i].unit) != units.end()) continue;
    units.push_back(kLayout[i].unit);
    GradientMap parameters;
    for (std::size_t j = 0; j < kLayout.size(); ++j) {
      if (kLayout[j].unit != kLayout[i].unit) continue;
      parameters.emplace(kLayout[j].name, MakeTensor(Initial(ElementCount(kLayout[j].shape), static_cast<int>(j)),
                                                     kLayout[j].shape, DataType::Float32, on_device));
    }
    model.RegisterUnit(kLayout[i].unit, parameters);
  }
  std::unique_ptr<amp::IOptimizer> optimizer;
  if (options.adam) {
    optimizer =
        std::make_unique<optimizers::Adam>(model.ShardedParameters(), optimizers::AdamOptions{.LearningRate = 0.05f});
  } else {
    optimizer = std::make_unique<optimizers::SGD>(model.ShardedParameters(),
                                                  optimizers::SGDOptions{.LearningRate = 0.1f, .Momentum = 0.5f});
  }
  ResidentRun run;
  const Device expected = on_device ? Device::CUDA(0) : Device::CPU();
  auto on_place = [&](const TensorPtr& tensor) {
    return tensor && tensor->GetDevice() == expected &&
           (on_device ? tensor->Backend() == &FakeBackend() : backends::cpu::IsCpuTensor(*tensor));
  };
  if (options.hooks) {
    model.SetPrefetch({.Forward = true, .Backward = true});
    std::reverse(units.begin(), units.end());  // backward order: the hooks prefetch unit i - 1
  }
  for (int step = 0; step < kResidentSteps; ++step) {
    float loss = 0.0f;
    for (const std::string& unit_name : units) {
      fsdp::FSDPShardingUnit& unit = model.Unit(unit_name);
      const std::size_t index = unit_name == "l1" ? 0 : 1;
      if (options.hooks) {
        model.PreBackward(index);
      } else {
        unit.Gather();
      }
      BOOST_TEST(on_place(unit.LocalShard()));
      BOOST_TEST(on_place(unit.GatheredParameter()));
      GradientMap gradients;
      for (const auto& [name, view] : unit.Parameters()) {
        BOOST_TEST(on_place(view));
        BOOST_TEST((view->GetDataType() == options.param_dtype));
        std::vector<float> values = mlfw_test::Peek(view);
        for (std::size_t i = 0; i < values.size(); ++i) {
          const float target = 0.05f * static_cast<float>(i % 5) + (name == "w" ? 0.2f : -0.1f);
          const float diff = values[i] - target;
          loss += diff * diff;
          values[i] = 2.0f * diff;
        }
        gradients.emplace(name, MakeTensor(values, view->GetShape(), options.param_dtype, on_device));
      }
      if (options.hooks) {
        if (step % 2 == 1) unit.ReduceGradients(gradients);  // a first micro-batch, then the hook's
        model.PostBackward(index, gradients);                // starts the reduction, releases the unit
        ++run.steps_checked;
        continue;
      }
      unit.ReduceGradients(gradients);
      if (step % 2 == 1) unit.ReduceGradients(gradients);  // accumulate a second micro-batch
      BOOST_TEST(on_place(unit.LocalGradient()));
      unit.Release();
      ++run.steps_checked;
    }
    if (options.hooks) {
      model.FinishBackward();
      for (const std::string& unit_name : units) BOOST_TEST(on_place(model.Unit(unit_name).LocalGradient()));
    }
    run.losses.push_back(loss);
    run.norms.push_back(model.ClipGradNorm(1.0f));
    model.Step(*optimizer);
  }
  for (const auto& [name, tensor] : model.FullParameters()) {
    BOOST_TEST(on_place(tensor));
    run.params.push_back(mlfw_test::Peek(tensor));
  }
  BOOST_TEST(mirror->aborted.empty());
  return run;
}

void ExpectIdentical(const ResidentRun& device, const ResidentRun& host) {
  BOOST_TEST(device.losses == host.losses, boost::test_tools::per_element());
  BOOST_TEST(device.norms == host.norms, boost::test_tools::per_element());
  BOOST_REQUIRE_EQUAL(device.params.size(), host.params.size());
  for (std::size_t i = 0; i < host.params.size(); ++i) {
    BOOST_TEST(device.params[i] == host.params[i], boost::test_tools::per_element());
  }
}

const fsdp::ShardingStrategy kStrategies[] = {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::ShardGradOp,
                                              fsdp::ShardingStrategy::NoShard};

}  // namespace

BOOST_AUTO_TEST_SUITE(FsdpDeviceResident)

BOOST_AUTO_TEST_CASE(TrainingOnTheDeviceIsBitIdenticalToTheHost) {
  for (const fsdp::ShardingStrategy strategy : kStrategies) {
    for (const DataType param : {DataType::Float32, DataType::Float16}) {
      for (const DataType reduce : {DataType::Float32, DataType::BFloat16}) {
        for (const int world : {1, 2}) {
          BOOST_TEST_CONTEXT(fsdp::ToString(strategy)
                             << " param " << ToString(param) << " reduce " << ToString(reduce) << " world " << world) {
            const ResidentOptions options{
                .strategy = strategy, .param_dtype = param, .reduce_dtype = reduce, .adam = world == 2};
            const ResidentRun host = Train(options, false, world);
            const ResidentRun device = Train(options, true, world);
            BOOST_TEST(host.steps_checked == 8);
            BOOST_TEST(host.losses.front() != host.losses.back());  // it trained
            ExpectIdentical(device, host);
          }
        }
      }
    }
  }
}

// The hook-driven, prefetching schedule keeps every buffer on the device and gives the bits of
// the host run, and the parameters of the manual schedule.
BOOST_AUTO_TEST_CASE(HooksWithPrefetchOnTheDeviceAreBitIdenticalToTheHost) {
  for (const fsdp::ShardingStrategy strategy : kStrategies) {
    for (const DataType param : {DataType::Float32, DataType::Float16}) {
      for (const DataType reduce : {DataType::Float32, DataType::BFloat16}) {
        BOOST_TEST_CONTEXT(fsdp::ToString(strategy) << " param " << ToString(param) << " reduce " << ToString(reduce)) {
          const ResidentOptions manual{.strategy = strategy, .param_dtype = param, .reduce_dtype = reduce};
          ResidentOptions hooks = manual;
          hooks.hooks = true;
          const ResidentRun host = Train(hooks, false, 2);
          const ResidentRun device = Train(hooks, true, 2);
          BOOST_TEST(host.steps_checked == 8);
          ExpectIdentical(device, host);
          const ResidentRun reference = Train(manual, false, 2);
          BOOST_REQUIRE_EQUAL(host.params.size(), reference.params.size());
          for (std::size_t i = 0; i < host.params.size(); ++i) {
            BOOST_TEST(host.params[i] == reference.params[i], boost::test_tools::per_element());
          }
        }
      }
    }
  }
}

// Over the job's real group (MPI with its host staging under mpiexec, else the local group).
BOOST_AUTO_TEST_CASE(RealGroupRunIsBitIdentical) {
  auto group = mlfw_test::WorldGroup();
  for (const fsdp::ShardingStrategy strategy : kStrategies) {
    BOOST_TEST_CONTEXT(fsdp::ToString(strategy) << " on " << group->BackendName() << " x" << group->WorldSize()) {
      const ResidentOptions options{
          .strategy = strategy, .param_dtype = DataType::Float16, .reduce_dtype = DataType::BFloat16, .adam = true};
      const ResidentRun host = Train(options, false, group->WorldSize(), group);
      const ResidentRun device = Train(options, true, group->WorldSize(), group);
      ExpectIdentical(device, host);
    }
  }
}

BOOST_AUTO_TEST_CASE(PerStepPathWaitsForTheDeviceOnlyForTheClippingNorm) {
  for (const fsdp::ShardingStrategy strategy : kStrategies) {
    for (const DataType param : {DataType::Float32, DataType::Float16}) {
      for (const DataType reduce : {DataType::Float32, DataType::BFloat16}) {
        BOOST_TEST_CONTEXT(fsdp::ToString(strategy) << " param " << ToString(param) << " reduce " << ToString(reduce)) {
          for (const int world : {1, 2}) {
            // World 1: the library's LocalProcessGroup, which copies device tensors on the device.
            auto mirror = std::make_shared<MirrorGroup>(2);
            std::shared_ptr<dist::IProcessGroup> group = mirror;
            if (world == 1) group = dist::MakeLocalProcessGroup();
            fsdp::FSDP model(group, {.Strategy = strategy, .ParamDType = param, .ReduceDType = reduce});
            // 15 elements (padded to 16 on two ranks) in one unit, 4 in the other (a single FP32
            // parameter whose size is a multiple of the world size: the direct reduce-scatter).
            fsdp::FSDPShardingUnit& a =
                model.RegisterUnit("a", {{"w", mlfw_test::FakeTensor(Initial(12, 1), {4, 3}, DataType::Float32)},
                                         {"b", mlfw_test::FakeTensor(Initial(3, 2), {3}, DataType::Float32)}});
            fsdp::FSDPShardingUnit& b =
                model.RegisterUnit("b", {{"w", mlfw_test::FakeTensor(Initial(4, 3), {4}, DataType::Float32)}});
            optimizers::SGD sgd(model.ShardedParameters(), {.LearningRate = 0.1f});
            auto gradients_of = [&](fsdp::FSDPShardingUnit& unit, DataType dtype) {
              GradientMap gradients;
              for (const auto& [name, view] : unit.Parameters()) {
                gradients.emplace(
                    name, mlfw_test::FakeTensor(std::vector<float>(view->Size(), 0.25f), view->GetShape(), dtype));
              }
              return gradients;
            };
            for (int step = 0; step < 3; ++step) {
              BOOST_TEST_CONTEXT("step " << step) {
                for (fsdp::FSDPShardingUnit* unit : {&a, &b}) {
                  BOOST_TEST(SyncsDuring([&] { unit->Gather(); }) == 0);
                  const GradientMap gradients = gradients_of(*unit, unit == &b ? DataType::Float32 : param);
                  BOOST_TEST(SyncsDuring([&] {
                               unit->ReduceGradients(gradients);
                               unit->ReduceGradients(gradients);  // accumulation
                               unit->Release();
                             }) == 0);
                }
                // The one wait of the step before the optimizer: the sum of squares of the
                // gradient shards, read back to be all-reduced on the host.
                BOOST_TEST(SyncsDuring([&] { model.ClipGradNorm(0.5f); }) == 1);
                model.Step(sgd);  // the host round trip of the reference optimizers (not counted here)
              }
            }
            if (world == 2) {
              BOOST_TEST(mirror->aborted.empty());
              BOOST_TEST(mirror->collectives > 0);
            }
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(UnitBuffersComeFromTheParametersBackendAndThePoolReusesThem) {
  auto group = std::make_shared<MirrorGroup>(2);
  fsdp::FSDP model(group, {.Strategy = fsdp::ShardingStrategy::FullShard, .ParamDType = DataType::Float16});
  fsdp::FSDPShardingUnit& unit =
      model.RegisterUnit("u", {{"w", mlfw_test::FakeTensor(Initial(9, 4), {9}, DataType::Float32, 1)}});
  BOOST_TEST((unit.LocalShard()->GetDevice() == Device::CUDA(1)));
  BOOST_TEST(unit.LocalShard()->Backend() == &FakeBackend());
  unit.Gather();
  unit.Release();
  const std::int64_t allocations = FakeBackend().AllocationCount();
  for (int i = 0; i < 3; ++i) {
    unit.Gather();
    BOOST_TEST((unit.GatheredParameter()->GetDevice() == Device::CUDA(1)));
    unit.Release();
  }
  BOOST_TEST(FakeBackend().AllocationCount() == allocations);  // warm: every Gather() reused the block
  BOOST_TEST(model.CachedBufferBytes() > 0u);
  // A view kept past Release() keeps its memory: the next Gather() must not write under it.
  unit.Gather();
  const TensorPtr kept = unit.Parameters().at("w");
  const std::vector<float> before = mlfw_test::Peek(kept);
  unit.Release();
  unit.Gather();
  BOOST_TEST(unit.GatheredParameter().get() != nullptr);
  BOOST_TEST(mlfw_test::Peek(kept) == before, boost::test_tools::per_element());
  unit.Release();
  // SetGatheredParameter() takes tensors of the unit's device and backend only.
  unit.Gather();
  BOOST_CHECK_THROW(unit.SetGatheredParameter(Zeros({10}, DataType::Float16)), ArgumentError);
  unit.SetGatheredParameter(mlfw_test::FakeTensor(std::vector<float>(10, 1.0f), {10}, DataType::Float16, 1));
  BOOST_TEST(mlfw_test::Peek(unit.Parameters().at("w")) == std::vector<float>(9, 1.0f),
             boost::test_tools::per_element());
  unit.Release();
  // State save and restore read the device shard back and write it again.
  const std::vector<std::byte> blob = model.StateDict();
  const std::vector<float> shard = mlfw_test::Peek(unit.LocalShard());
  unit.LocalShard()->CopyFromFloats(std::vector<float>(shard.size(), 3.0f));
  model.LoadStateDict(blob);
  BOOST_TEST(mlfw_test::Peek(unit.LocalShard()) == shard, boost::test_tools::per_element());
}

// The primitives FSDP's device path uses give the same bits on every path: the CPU backend's
// kernels, the fake device backend, the host fallback (no backend) and mixed pairs.
BOOST_AUTO_TEST_CASE(CopyIntoAndAddIntoAgreeOnEveryPath) {
  const std::vector<float> a = {1.5f, -2.25f, 3.0e-3f, 65504.0f, -7.0f, 0.1f, 1.0e-8f};
  const std::vector<float> b = {0.5f, 4.0f, -1.0e-3f, 1.0f, 7.0f, 0.2f, 3.0f};
  const Shape shape{a.size()};
  for (const DataType src_dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
    for (const DataType dst_dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
      for (const float alpha : {1.0f, -0.375f}) {
        BOOST_TEST_CONTEXT(ToString(src_dtype) << " into " << ToString(dst_dtype) << " alpha " << alpha) {
          auto make = [&](int kind, const std::vector<float>& values, DataType dtype) -> TensorPtr {
            if (kind == 1) return mlfw_test::FakeTensor(values, shape, dtype);
            if (kind == 2) return std::make_shared<UserTensor>(FromVector(values, shape, dtype), kNoBackendGpu);
            return FromVector(values, shape, dtype);
          };
          std::vector<std::vector<float>> added;
          std::vector<std::vector<float>> copied;
          for (const auto& [src_kind, dst_kind] : {std::pair{0, 0}, {1, 1}, {2, 2}, {0, 2}, {1, 0}}) {
            const TensorPtr src = make(src_kind, a, src_dtype);
            const TensorPtr dst = make(dst_kind, b, dst_dtype);
            AddInto(std::span<const TensorPtr>(&src, 1), std::span<const TensorPtr>(&dst, 1), alpha);
            added.push_back(mlfw_test::Peek(dst));
            CopyInto(std::span<const TensorPtr>(&src, 1), std::span<const TensorPtr>(&dst, 1), alpha);
            copied.push_back(mlfw_test::Peek(dst));
          }
          // Reference: widen, FP32 product, FP32 sum, round into the destination dtype.
          const std::vector<float> wa = FromVector(a, shape, src_dtype)->ToFloatVector();
          const std::vector<float> wb = FromVector(b, shape, dst_dtype)->ToFloatVector();
          std::vector<float> sum(a.size());
          std::vector<float> scaled(a.size());
          // (Two loops through memory, so the compiler cannot contract them into an FMA.)
          for (std::size_t i = 0; i < a.size(); ++i) scaled[i] = alpha * wa[i];
          for (std::size_t i = 0; i < a.size(); ++i) sum[i] = wb[i] + scaled[i];
          const std::vector<float> want_added = FromVector(sum, shape, dst_dtype)->ToFloatVector();
          const std::vector<float> want_copied = FromVector(scaled, shape, dst_dtype)->ToFloatVector();
          for (std::size_t k = 0; k < added.size(); ++k) {
            BOOST_TEST(added[k] == want_added, boost::test_tools::per_element());
            BOOST_TEST(copied[k] == want_copied, boost::test_tools::per_element());
          }
        }
      }
    }
  }
  // Shapes must match pairwise.
  const TensorPtr x = Zeros({2, 3});
  const TensorPtr y = Zeros({6});
  BOOST_CHECK_THROW(AddInto(std::span<const TensorPtr>(&x, 1), std::span<const TensorPtr>(&y, 1)), ArgumentError);
  BOOST_CHECK_THROW(CopyInto(std::span<const TensorPtr>(&x, 1), std::span<const TensorPtr>(&y, 1)), ArgumentError);
}

BOOST_AUTO_TEST_CASE(ParametersWithoutAnAllocatingBackendKeepHostBuffers) {
  fsdp::FSDP model(dist::MakeLocalProcessGroup(), {.ParamDType = DataType::Float16});
  fsdp::FSDPShardingUnit& unit = model.RegisterUnit(
      "u", {{"w", std::make_shared<UserTensor>(FromVector({1.0f, -2.0f, 3.0f}, {3}), kNoBackendGpu)}});
  BOOST_TEST(backends::cpu::IsCpuTensor(*unit.LocalShard()));
  BOOST_TEST(mlfw_test::Peek(unit.LocalShard()) == std::vector<float>({1.0f, -2.0f, 3.0f}),
             boost::test_tools::per_element());
  unit.Gather();
  BOOST_TEST(backends::cpu::IsCpuTensor(*unit.GatheredParameter()));
  const GradientMap gradients = {
      {"w", std::make_shared<UserTensor>(FromVector({0.5f, 0.25f, -1.0f}, {3}, DataType::Float16), kNoBackendGpu)}};
  unit.ReduceGradients(gradients);
  unit.ReduceGradients(gradients);
  unit.Release();
  BOOST_TEST(backends::cpu::IsCpuTensor(*unit.LocalGradient()));
  BOOST_TEST(mlfw_test::Peek(unit.LocalGradient()) == std::vector<float>({1.0f, 0.5f, -2.0f}),
             boost::test_tools::per_element());
  // Later units must still be on the same device as the first one.
  BOOST_CHECK_THROW(model.RegisterUnit("v", {{"x", FromVector({1.0f}, {1})}}), ArgumentError);
}

BOOST_AUTO_TEST_CASE(ParametersOnTwoDevicesAreRejected) {
  auto group = std::make_shared<MirrorGroup>(1);
  fsdp::FSDP model(group);
  auto expect_naming = [](const std::function<void()>& call, const std::vector<std::string>& words) {
    try {
      call();
      BOOST_FAIL("expected an ArgumentError");
    } catch (const ArgumentError& error) {
      const std::string message = error.what();
      for (const std::string& word : words) {
        BOOST_TEST_INFO("message: " << message);
        BOOST_TEST(message.find(word) != std::string::npos);
      }
    }
  };
  expect_naming(
      [&] {
        model.RegisterUnit("mixed", {{"a", mlfw_test::FakeTensor({1, 2}, {2}, DataType::Float32, 0)},
                                     {"b", mlfw_test::FakeTensor({3, 4}, {2}, DataType::Float32, 1)}});
      },
      {"'b'", "cuda:0", "cuda:1"});
  expect_naming(
      [&] {
        model.RegisterUnit("host_and_device", {{"a", FromVector({1, 2}, {2})},
                                               {"b", mlfw_test::FakeTensor({3, 4}, {2}, DataType::Float32, 0)}});
      },
      {"'b'", "cpu", "cuda:0"});
  BOOST_TEST(model.UnitCount() == 0u);  // nothing registered
  model.RegisterUnit("first", {{"a", mlfw_test::FakeTensor({1, 2}, {2}, DataType::Float32, 0)}});
  expect_naming([&] { model.RegisterUnit("second", {{"c", FromVector({1, 2}, {2})}}); }, {"'c'", "cpu", "cuda:0"});
  BOOST_TEST(model.UnitCount() == 1u);
  BOOST_TEST(group->aborted.empty());
}

BOOST_AUTO_TEST_SUITE_END()
