// What device-resident FSDP needs from the CUDA backend, checked on a GPU against the CPU
// backend: Allocate() and aliasing View() (bounds, sharing, lifetime), CopyInto() (the cast
// without a flag) and AddInto() bit-equal to the CPU backend for every dtype pair, and an FSDP
// training run on CUDA parameters bit-identical to the same run on CPU parameters, with every
// unit buffer on the GPU, and FP8 parameter gathers bit-identical to the CPU's. Needs a CUDA device.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/fsdp/FSDP.hpp>
#include <mlframework/optimizers/SGD.hpp>

#include "cuda/CudaTestUtil.hpp"

using namespace mlframework;
using mlfw_cuda_test::Bits;
using mlfw_cuda_test::kDtypes;
using mlfw_cuda_test::kGpu;
namespace cuda = mlframework::backends::cuda;
namespace fsdp = mlframework::distributed::fsdp;

namespace {

std::vector<float> Random(std::size_t size, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> values(size);
  for (float& v : values) v = normal(rng);
  return values;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaViewsAndAccumulation)

BOOST_AUTO_TEST_CASE(AllocateAndViewShareTheAllocation) {
  const TensorBackend& backend = cuda::Backend();
  for (const DataType dtype : kDtypes) {
    BOOST_TEST_CONTEXT(ToString(dtype)) {
      TensorPtr base = backend.Allocate({10}, dtype, kGpu);
      BOOST_TEST(cuda::IsCudaTensor(*base));
      BOOST_TEST((base->GetDevice() == kGpu));
      BOOST_TEST(base->ToFloatVector() == std::vector<float>(10, 0.0f), boost::test_tools::per_element());
      const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
      base->CopyFromFloats(values);
      const TensorPtr view = backend.View(base, 3, {2, 2});
      BOOST_TEST((view->GetShape() == Shape{2, 2}));
      BOOST_TEST((view->GetDataType() == dtype));
      BOOST_TEST(view->ToFloatVector() == std::vector<float>({4, 5, 6, 7}), boost::test_tools::per_element());
      BOOST_TEST(static_cast<char*>(cuda::DevicePointer(*view)) - static_cast<char*>(cuda::DevicePointer(*base)) ==
                 static_cast<std::ptrdiff_t>(3 * ElementSize(dtype)));
      view->CopyFromFloats(std::vector<float>{-1, -2, -3, -4});
      BOOST_TEST(base->ToFloatVector() == std::vector<float>({1, 2, 3, -1, -2, -3, -4, 8, 9, 10}),
                 boost::test_tools::per_element());
      // A view of a view, and views outliving their base.
      const TensorPtr inner = backend.View(view, 1, {2});
      BOOST_TEST(inner->ToFloatVector() == std::vector<float>({-2, -3}), boost::test_tools::per_element());
      base.reset();
      BOOST_TEST(inner->ToFloatVector() == std::vector<float>({-2, -3}), boost::test_tools::per_element());
      inner->MultiplyInPlace(2.0f);
      BOOST_TEST(view->ToFloatVector() == std::vector<float>({-1, -4, -6, -4}), boost::test_tools::per_element());
      BOOST_CHECK_THROW(backend.View(view, 3, {2}), ArgumentError);
      BOOST_CHECK_THROW(backend.View(nullptr, 0, {1}), ArgumentNullError);
      BOOST_CHECK_THROW(backend.View(Zeros({4}), 0, {1}), ArgumentError);
      BOOST_CHECK_THROW(backend.Allocate({4}, dtype, Device::CPU()), ArgumentError);
    }
  }
}

BOOST_AUTO_TEST_CASE(ContiguousTensorsAreViewsOfOneDeviceBuffer) {
  const std::vector<Shape> shapes{{3}, {2, 5}, {0}, {1000}};
  for (const DataType dtype : kDtypes) {
    BOOST_TEST_CONTEXT(ToString(dtype)) {
      auto tensors = ZerosContiguous(shapes, dtype, kGpu);
      BOOST_TEST_REQUIRE(tensors.size() == shapes.size());
      const auto* first = static_cast<const char*>(cuda::DevicePointer(*tensors[0]));
      std::size_t expected_offset = 0;
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        BOOST_TEST(cuda::IsCudaTensor(*tensors[i]));
        BOOST_TEST((tensors[i]->GetShape() == shapes[i]));
        const auto* start = static_cast<const char*>(cuda::DevicePointer(*tensors[i]));
        BOOST_TEST(static_cast<std::size_t>(start - first) == expected_offset);
        expected_offset += tensors[i]->Size() * ElementSize(dtype);  // back to back, no padding
        BOOST_TEST(tensors[i]->SumOfSquares() == 0.0);
      }
      tensors[1]->CopyFromFloats(std::vector<float>(10, 1.0f));
      BOOST_TEST(tensors[0]->SumOfSquares() == 0.0);
      BOOST_TEST(tensors[3]->SumOfSquares() == 0.0);
      const TensorPtr kept = tensors[1];
      tensors.clear();
      BOOST_TEST(kept->SumOfSquares() == 10.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(CopyIntoAndAddIntoMatchTheCpuBitForBit) {
  const std::vector<std::size_t> sizes = {1, 1000, 16384 * 2 + 5, 7};
  for (const DataType src_dtype : kDtypes) {
    for (const DataType dst_dtype : kDtypes) {
      for (const float alpha : {1.0f, 0.5f, -3.0f}) {
        BOOST_TEST_CONTEXT(ToString(src_dtype) << " into " << ToString(dst_dtype) << " alpha " << alpha) {
          std::vector<TensorPtr> cpu_src, cpu_dst, gpu_src, gpu_dst;
          for (std::size_t i = 0; i < sizes.size(); ++i) {
            const std::vector<float> a = Random(sizes[i], static_cast<unsigned>(i));
            const std::vector<float> b = Random(sizes[i], static_cast<unsigned>(i + 100));
            const Shape shape{sizes[i]};
            cpu_src.push_back(FromVector(a, shape, src_dtype));
            cpu_dst.push_back(FromVector(b, shape, dst_dtype));
            gpu_src.push_back(FromVector(a, shape, src_dtype, kGpu));
            gpu_dst.push_back(FromVector(b, shape, dst_dtype, kGpu));
          }
          AddInto(cpu_src, cpu_dst, alpha);
          AddInto(gpu_src, gpu_dst, alpha);
          for (std::size_t i = 0; i < sizes.size(); ++i) BOOST_TEST(Bits(*gpu_dst[i]) == Bits(*cpu_dst[i]));
          CopyInto(cpu_src, cpu_dst, alpha);
          CopyInto(gpu_src, gpu_dst, alpha);
          for (std::size_t i = 0; i < sizes.size(); ++i) BOOST_TEST(Bits(*gpu_dst[i]) == Bits(*cpu_dst[i]));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(FsdpOnCuda)

BOOST_AUTO_TEST_CASE(TrainingOnTheGpuIsBitIdenticalToTheCpu) {
  for (const fsdp::ShardingStrategy strategy :
       {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::ShardGradOp, fsdp::ShardingStrategy::NoShard}) {
    for (const DataType param : {DataType::Float32, DataType::Float16}) {
      BOOST_TEST_CONTEXT(fsdp::ToString(strategy) << " " << ToString(param)) {
        std::vector<std::vector<float>> results[2];
        std::vector<float> losses[2];
        for (const bool on_gpu : {false, true}) {
          const Device device = on_gpu ? kGpu : Device::CPU();
          fsdp::FSDP model(distributed::MakeLocalProcessGroup(),
                           {.Strategy = strategy, .ParamDType = param, .ReduceDType = DataType::BFloat16});
          fsdp::FSDPShardingUnit& unit =
              model.RegisterUnit("layer", {{"w", FromVector(Random(300, 1), {20, 15}, DataType::Float32, device)},
                                           {"b", FromVector(Random(15, 2), {15}, DataType::Float32, device)}});
          optimizers::SGD sgd(model.ShardedParameters(), {.LearningRate = 0.01f, .Momentum = 0.9f});
          for (int step = 0; step < 4; ++step) {
            unit.Gather();
            BOOST_TEST((unit.GatheredParameter()->GetDevice() == device));
            GradientMap gradients;
            float loss = 0.0f;
            for (const auto& [name, view] : unit.Parameters()) {
              BOOST_TEST((view->GetDevice() == device));
              std::vector<float> values = view->ToFloatVector();
              for (float& v : values) {
                loss += v * v;
                v *= 2.0f;
              }
              gradients.emplace(name, FromVector(values, view->GetShape(), param, device));
            }
            unit.ReduceGradients(gradients);
            if (step % 2 == 1) unit.ReduceGradients(gradients);
            BOOST_TEST((unit.LocalGradient()->GetDevice() == device));
            BOOST_TEST((unit.LocalShard()->GetDevice() == device));
            unit.Release();
            model.ClipGradNorm(1e6f);  // computed, never applied: the two backends round sums of squares differently
            model.Step(sgd);
            losses[on_gpu ? 1 : 0].push_back(loss);
          }
          for (const auto& [name, tensor] : model.FullParameters()) {
            BOOST_TEST((tensor->GetDevice() == device));
            results[on_gpu ? 1 : 0].push_back(tensor->ToFloatVector());
          }
        }
        BOOST_TEST(losses[1] == losses[0], boost::test_tools::per_element());
        BOOST_REQUIRE_EQUAL(results[1].size(), results[0].size());
        for (std::size_t i = 0; i < results[0].size(); ++i) {
          BOOST_TEST(results[1][i] == results[0][i], boost::test_tools::per_element());
        }
      }
    }
  }
}

// FP8 parameter gathers on the GPU (amax, scale update and scaled cast queued on the device)
// write the bytes and inverse scales the CPU backend writes, before and after steps.
BOOST_AUTO_TEST_CASE(Fp8GathersOnTheGpuAreBitIdenticalToTheCpu) {
  for (const fsdp::ShardingStrategy strategy :
       {fsdp::ShardingStrategy::FullShard, fsdp::ShardingStrategy::ShardGradOp, fsdp::ShardingStrategy::NoShard}) {
    for (const DataType param : {DataType::Float8E4M3FN, DataType::Float8E5M2}) {
      BOOST_TEST_CONTEXT(fsdp::ToString(strategy) << " " << ToString(param)) {
        std::vector<std::vector<float>> gathered[2];
        std::vector<float> inverses[2];
        for (const bool on_gpu : {false, true}) {
          const Device device = on_gpu ? kGpu : Device::CPU();
          fsdp::FSDP model(distributed::MakeLocalProcessGroup(), {.Strategy = strategy, .ParamDType = param});
          fsdp::FSDPShardingUnit& unit =
              model.RegisterUnit("layer", {{"w", FromVector(Random(300, 3), {20, 15}, DataType::Float32, device)},
                                           {"b", FromVector(Random(15, 4), {15}, DataType::Float32, device)}});
          optimizers::SGD sgd(model.ShardedParameters(), {.LearningRate = 0.25f});
          for (int step = 0; step < 3; ++step) {
            unit.Gather();
            BOOST_TEST((unit.GatheredParameter()->GetDevice() == device));
            GradientMap gradients;
            for (const auto& [name, view] : unit.Parameters()) {
              BOOST_TEST((view->GetDataType() == param));
              gathered[on_gpu ? 1 : 0].push_back(view->ToFloatVector());  // FP8 decodes exactly
              const TensorPtr& inverse = unit.Float8ScaleInverses().at(name);
              BOOST_TEST((inverse->GetDevice() == device));
              inverses[on_gpu ? 1 : 0].push_back(inverse->ToFloatVector()[0]);
              gradients.emplace(name, FromVector(Random(view->Size(), static_cast<unsigned>(5 + step)),
                                                 view->GetShape(), DataType::Float32, device));
            }
            unit.ReduceGradients(gradients);
            unit.Release();
            model.Step(sgd);
          }
        }
        BOOST_TEST(inverses[1] == inverses[0], boost::test_tools::per_element());
        BOOST_REQUIRE_EQUAL(gathered[1].size(), gathered[0].size());
        for (std::size_t i = 0; i < gathered[0].size(); ++i) {
          BOOST_TEST(gathered[1][i] == gathered[0][i], boost::test_tools::per_element());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(ParametersOnTheGpuAndTheCpuAreRejected) {
  fsdp::FSDP model(distributed::MakeLocalProcessGroup());
  BOOST_CHECK_THROW(model.RegisterUnit("mixed", {{"a", Zeros({4}, DataType::Float32, kGpu)}, {"b", Zeros({4})}}),
                    ArgumentError);
  BOOST_TEST(model.UnitCount() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
