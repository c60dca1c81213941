// Backend conformance: every multi-tensor operation and every per-tensor
// operation runs on the CPU backend and on the CUDA backend over the same
// inputs, and the results are compared: exactly (bits) for values and flags,
// with a relative tolerance for sums of squares. Needs a CUDA device.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cuda/CudaTensor.hpp>
#include <mlframework/core/Error.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/MultiTensor.hpp>
#include <mlframework/core/OverflowReport.hpp>
#include <mlframework/core/Tensor.hpp>

#include "cuda/CudaTestUtil.hpp"
#include "mlframework/backends/cuda/LaunchPlan.hpp"

using namespace mlframework;
using mlfw_cuda_test::Bits;
using mlfw_cuda_test::kDtypes;
using mlfw_cuda_test::kGpu;
namespace cuda = mlframework::backends::cuda;

namespace {

struct Pair {
  std::vector<TensorPtr> cpu;
  std::vector<TensorPtr> gpu;
};

enum class Specials { None, Inf, NaN, Huge };

// The tensor that gets the special value: the first non-empty one from the middle of the list on.
std::size_t SpecialTensor(const std::vector<std::size_t>& sizes) {
  std::size_t i = sizes.size() / 2;
  while (i < sizes.size() && sizes[i] == 0) {
    ++i;
  }
  return i;
}

// The same values on both backends: sizes around the chunk boundaries, mixed dtypes,
// optionally one Inf / NaN / value that overflows FP16 after scaling by 2, as the last
// element of SpecialTensor().
Pair MakeLists(const std::vector<std::size_t>& sizes, Specials specials, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const std::size_t special_tensor = SpecialTensor(sizes);
  BOOST_TEST_REQUIRE(special_tensor < sizes.size(), "every size set needs a non-empty tensor from its middle on");
  Pair pair;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::vector<float> values(sizes[i]);
    for (float& v : values) {
      v = normal(rng);
    }
    if (i == special_tensor) {
      const std::size_t at = values.size() - 1;
      if (specials == Specials::Inf) {
        values[at] = -std::numeric_limits<float>::infinity();
      } else if (specials == Specials::NaN) {
        values[at] = std::numeric_limits<float>::quiet_NaN();
      } else if (specials == Specials::Huge) {
        values[at] = 60000.0f;
      }
    }
    const DataType dtype = kDtypes[i % 3];
    pair.cpu.push_back(FromVector(values, {values.size()}, dtype, Device::CPU()));
    pair.gpu.push_back(FromVector(values, {values.size()}, dtype, kGpu));
  }
  return pair;
}

void CheckSameBits(const std::vector<TensorPtr>& cpu, const std::vector<TensorPtr>& gpu) {
  BOOST_TEST_REQUIRE(cpu.size() == gpu.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    BOOST_TEST_INFO("tensor " << i << " dtype " << ToString(cpu[i]->GetDataType()));
    BOOST_TEST(gpu[i]->GetDevice() == kGpu);
    BOOST_TEST(cuda::IsCudaTensor(*gpu[i]));
    BOOST_TEST(Bits(*cpu[i]) == Bits(*gpu[i]), boost::test_tools::per_element());
  }
}

const std::vector<std::vector<std::size_t>>& SizeSets() {
  static const std::vector<std::vector<std::size_t>> kSets = [] {
    std::vector<std::vector<std::size_t>> s = {
        {1},
        {16383, 16384, 16385},
        {0, 5, 0, 100000, 3},
        {250000},
    };
    // Small tensors: the longest list whose table travels inside the launch, the shortest
    // whose table is copied to the device first, and a long one (one launch either way).
    for (const std::size_t count : {cuda::kInlineTableTensors, cuda::kInlineTableTensors + 1, std::size_t{2348}}) {
      std::vector<std::size_t> many(count);
      for (std::size_t i = 0; i < many.size(); ++i) {
        many[i] = 1 + (i * 37) % 900;
      }
      s.push_back(many);
    }
    return s;
  }();
  return kSets;
}

bool CloseRelative(double a, double b, double tolerance) {
  if (!std::isfinite(a) || !std::isfinite(b)) {
    return std::isnan(a) == std::isnan(b) && (std::isnan(a) || a == b);
  }
  return std::fabs(a - b) <= tolerance * std::max(std::fabs(a), std::fabs(b)) + 1e-300;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(CudaBackendConformance)

BOOST_AUTO_TEST_CASE(FactoriesAndCopies) {
  for (const DataType dtype : kDtypes) {
    const std::vector<float> values = {0.0f, -1.5f, 65504.0f, 1e-7f, 3.14159f, -0.0f, 70000.0f};
    const TensorPtr cpu = FromVector(values, {7}, dtype);
    const TensorPtr gpu = FromVector(values, {7}, dtype, kGpu);
    BOOST_TEST((gpu->GetShape() == Shape{7}));
    BOOST_TEST((gpu->GetDataType() == dtype));
    BOOST_TEST(Bits(*cpu) == Bits(*gpu), boost::test_tools::per_element());
    const TensorPtr zeros = Zeros({3, 4}, dtype, kGpu);
    BOOST_TEST(zeros->ToFloatVector() == std::vector<float>(12, 0.0f), boost::test_tools::per_element());
    BOOST_TEST(Scalar(2.5f, dtype, kGpu)->ToFloatVector() == std::vector<float>{2.5f});
    BOOST_TEST(Zeros({0}, dtype, kGpu)->ToFloatVector().empty());
  }
  const TensorPtr gpu = Zeros({2}, DataType::Float32, kGpu);
  BOOST_CHECK_THROW(gpu->CopyFromFloats(std::vector<float>(3)), ArgumentError);
}

BOOST_AUTO_TEST_CASE(ScanNonFiniteMatchesCpu) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(7);
  for (const DataType dtype : kDtypes) {
    std::vector<TensorPtr> cpu;
    std::vector<TensorPtr> gpu;
    for (const std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{3000001}}) {
      for (int kinds = 0; kinds < 8; ++kinds) {
        std::vector<float> values(size, 0.25f);
        std::uniform_int_distribution<std::size_t> at(0, size == 0 ? 0 : size - 1);
        for (int k = 0; k < 3 && size > 0; ++k) {
          if ((kinds & (1 << k)) != 0) values[at(rng)] = k == 0 ? nan : (k == 1 ? inf : -inf);
        }
        cpu.push_back(FromVector(values, {size}, dtype));
        gpu.push_back(FromVector(values, {size}, dtype, kGpu));
      }
    }
    const std::vector<NonFiniteScan> expected = ScanNonFinite(cpu);
    const std::vector<NonFiniteScan> got = ScanNonFinite(gpu);
    BOOST_TEST_REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      BOOST_TEST_CONTEXT(ToString(dtype) << " tensor " << i) {
        BOOST_TEST(got[i].Count == expected[i].Count);
        BOOST_TEST(got[i].FirstIndex == expected[i].FirstIndex);
        BOOST_TEST(got[i].HasNaN == expected[i].HasNaN);
        BOOST_TEST(got[i].HasPosInf == expected[i].HasPosInf);
        BOOST_TEST(got[i].HasNegInf == expected[i].HasNegInf);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(UnscaleAndCheckMatchesCpu) {
  unsigned seed = 1;
  for (const auto& sizes : SizeSets()) {
    for (const Specials specials : {Specials::None, Specials::Inf, Specials::NaN, Specials::Huge}) {
      for (const float factor : {0.5f, 2.0f, 1.0f / 3.0f}) {
        Pair pair = MakeLists(sizes, specials, seed++);
        const bool cpu_found = UnscaleAndCheck(pair.cpu, factor);
        const bool gpu_found = UnscaleAndCheck(pair.gpu, factor);
        BOOST_TEST(cpu_found == gpu_found);
        CheckSameBits(pair.cpu, pair.gpu);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(HasNonFiniteMatchesCpu) {
  unsigned seed = 100;
  for (const auto& sizes : SizeSets()) {
    for (const Specials specials : {Specials::None, Specials::Inf, Specials::NaN}) {
      const Pair pair = MakeLists(sizes, specials, seed++);
      BOOST_TEST(HasNonFinite(pair.cpu) == HasNonFinite(pair.gpu));
      BOOST_TEST(HasNonFinite(pair.gpu) == (specials != Specials::None));
    }
  }
}

BOOST_AUTO_TEST_CASE(CheckAndSumSquaresMatchesCpuAndIsDeterministic) {
  unsigned seed = 200;
  for (const auto& sizes : SizeSets()) {
    for (const Specials specials : {Specials::None, Specials::NaN}) {
      for (const float factor : {1.0f, 1.0f / 1024.0f}) {
        const Pair pair = MakeLists(sizes, specials, seed++);
        const NonFiniteAndNorm cpu = CheckAndSumSquares(pair.cpu, factor);
        const NonFiniteAndNorm gpu = CheckAndSumSquares(pair.gpu, factor);
        BOOST_TEST(cpu.FoundNonFinite == gpu.FoundNonFinite);
        // The CPU backend sums longer FP32 runs per chunk, so it is compared more loosely than the FP64 reference.
        BOOST_TEST(CloseRelative(cpu.SumOfSquares, gpu.SumOfSquares, 1e-5),
                   "cpu " << cpu.SumOfSquares << " gpu " << gpu.SumOfSquares);
        // FP64 reference from the stored values.
        if (specials == Specials::None) {
          double reference = 0.0;
          for (const TensorPtr& t : pair.gpu) {
            for (const float v : t->ToFloatVector()) {
              reference += static_cast<double>(v) * v;
            }
          }
          reference *= static_cast<double>(factor) * factor;
          BOOST_TEST(CloseRelative(reference, gpu.SumOfSquares, 1e-6));
        }
        const NonFiniteAndNorm again = CheckAndSumSquares(pair.gpu, factor);
        BOOST_TEST(std::bit_cast<std::uint64_t>(again.SumOfSquares) == std::bit_cast<std::uint64_t>(gpu.SumOfSquares));
        BOOST_TEST(CloseRelative(SumOfSquares(pair.gpu, factor), gpu.SumOfSquares, 0.0));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(ScaleInPlaceMatchesCpu) {
  unsigned seed = 300;
  for (const auto& sizes : SizeSets()) {
    for (const float factor : {65536.0f, 1.0f / 3.0f, -2.0f}) {
      Pair pair = MakeLists(sizes, Specials::Huge, seed++);
      ScaleInPlace(pair.cpu, factor);
      ScaleInPlace(pair.gpu, factor);
      CheckSameBits(pair.cpu, pair.gpu);
    }
  }
}

BOOST_AUTO_TEST_CASE(CastIntoEveryDtypePairMatchesCpu) {
  unsigned seed = 400;
  for (const auto& sizes : SizeSets()) {
    for (const DataType target : kDtypes) {
      for (const float factor : {1.0f, 1.0f / 65536.0f, 4.0f}) {
        const Pair pair = MakeLists(sizes, Specials::Huge, seed++);
        std::vector<TensorPtr> cpu_dst;
        std::vector<TensorPtr> gpu_dst;
        for (const TensorPtr& t : pair.cpu) {
          cpu_dst.push_back(Zeros(t->GetShape(), target));
          gpu_dst.push_back(Zeros(t->GetShape(), target, kGpu));
        }
        const bool cpu_found = CastInto(pair.cpu, cpu_dst, factor);
        const bool gpu_found = CastInto(pair.gpu, gpu_dst, factor);
        BOOST_TEST(cpu_found == gpu_found);
        CheckSameBits(cpu_dst, gpu_dst);
        // Cast() makes new tensors on the sources' device.
        const auto cpu_new = Cast(pair.cpu, target, factor);
        const auto gpu_new = Cast(pair.gpu, target, factor);
        CheckSameBits(cpu_new, gpu_new);
        CheckSameBits(cpu_dst, gpu_new);
      }
    }
  }
}

// Calls queue their launches without waiting for the device. A long kernel first keeps the
// device busy, so the later calls' tables (growing, more than the staging buffers, with inline
// ones between) are written while earlier ones still wait to be read: each launch must still
// see its own table.
BOOST_AUTO_TEST_CASE(QueuedCallsKeepTheirOwnTables) {
  const TensorPtr busy = Zeros({std::size_t{1} << 26}, DataType::Float32, kGpu);
  ScaleInPlace(std::vector<TensorPtr>{busy}, 2.0f);
  std::vector<Pair> pairs;
  std::vector<float> factors;
  unsigned seed = 350;
  for (std::size_t k = 0; k < 12; ++k) {
    const std::size_t count = k % 3 == 2 ? 3 : cuda::kInlineTableTensors + 1 + 97 * k;
    std::vector<std::size_t> sizes(count);
    for (std::size_t i = 0; i < count; ++i) {
      sizes[i] = 1 + (i * 13 + k) % 300;
    }
    pairs.push_back(MakeLists(sizes, Specials::None, seed++));
    factors.push_back(0.5f + static_cast<float>(k));
    ScaleInPlace(pairs.back().gpu, factors.back());
  }
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    BOOST_TEST_INFO("list " << k);
    ScaleInPlace(pairs[k].cpu, factors[k]);
    CheckSameBits(pairs[k].cpu, pairs[k].gpu);
  }
}

// Long lists keep their uploaded tables (TableCache): the same memory wrapped in new tensors
// reuses its table, a list with one tensor's memory replaced must not, and more lists than the
// device keeps, queued without waiting behind a long kernel, evict tables that kernels still
// have to read. Every result must match the CPU.
BOOST_AUTO_TEST_CASE(ListsPassedAgainReuseTheirTableOnlyForTheSameMemory) {
  const std::size_t count = cuda::kInlineTableTensors + 222;
  std::vector<std::size_t> sizes(count);
  for (std::size_t i = 0; i < count; ++i) {
    sizes[i] = 1 + (i * 29) % 700;
  }
  Pair pair = MakeLists(sizes, Specials::None, 901);
  ScaleInPlace(pair.gpu, 2.0f);
  ScaleInPlace(pair.cpu, 2.0f);
  // The same memory in new tensors, as a framework that wraps its gradients every step.
  std::vector<TensorPtr> rewrapped;
  for (const TensorPtr& t : pair.gpu) {
    rewrapped.push_back(cuda::Wrap(cuda::DevicePointer(*t), t->GetShape(), t->GetDataType(), 0, t));
  }
  ScaleInPlace(rewrapped, 3.0f);
  ScaleInPlace(pair.cpu, 3.0f);
  CheckSameBits(pair.cpu, pair.gpu);
  // One tensor's memory replaced (same size and dtype): its new memory is scaled, the old is not.
  const std::size_t moved = count / 2;
  const Pair replacement = MakeLists({sizes[moved]}, Specials::None, 902);
  std::vector<TensorPtr> gpu_list = rewrapped;
  std::vector<TensorPtr> cpu_list = pair.cpu;
  gpu_list[moved] = replacement.gpu[0];
  cpu_list[moved] = replacement.cpu[0];
  // The replacement's dtype is kDtypes[0]; the tensor it replaces must have the same one.
  BOOST_TEST_REQUIRE((gpu_list[moved]->GetDataType() == pair.gpu[moved]->GetDataType()));
  ScaleInPlace(gpu_list, 0.5f);
  ScaleInPlace(cpu_list, 0.5f);
  CheckSameBits(pair.cpu, pair.gpu);
  CheckSameBits(replacement.cpu, replacement.gpu);

  // Twelve lists, more than a device keeps, each passed three times, all queued behind a long
  // kernel: tables are evicted while launches that read them still wait.
  std::vector<Pair> lists;
  for (std::size_t k = 0; k < 12; ++k) {
    std::vector<std::size_t> list_sizes(cuda::kInlineTableTensors + 1 + 31 * k);
    for (std::size_t i = 0; i < list_sizes.size(); ++i) {
      list_sizes[i] = 1 + (i * 17 + k) % 400;
    }
    lists.push_back(MakeLists(list_sizes, Specials::None, 910 + static_cast<unsigned>(k)));
  }
  // Made after the lists: creating them copies to the device and may wait for it.
  const TensorPtr busy = Zeros({std::size_t{1} << 26}, DataType::Float32, kGpu);
  ScaleInPlace(std::vector<TensorPtr>{busy}, 2.0f);
  for (int round = 0; round < 3; ++round) {
    for (std::size_t k = 0; k < lists.size(); ++k) {
      const float factor = 0.75f + 0.25f * static_cast<float>(k + round);
      ScaleInPlace(lists[k].gpu, factor);
      ScaleInPlace(lists[k].cpu, factor);
    }
  }
  for (std::size_t k = 0; k < lists.size(); ++k) {
    BOOST_TEST_INFO("list " << k);
    CheckSameBits(lists[k].cpu, lists[k].gpu);
  }
}

// The kernels convert with the hardware's instructions, the CPU backend with FloatBits.hpp:
// every 16-bit value is widened, and every value, every halfway point between two neighbours
// and the floats one step either side of it are narrowed, on both backends.
BOOST_AUTO_TEST_CASE(EveryHalfAndBFloat16ValueConvertsLikeTheCpu) {
  for (const DataType dtype : {DataType::Float16, DataType::BFloat16}) {
    BOOST_TEST_INFO("dtype " << ToString(dtype));
    const auto widen = [dtype](std::uint32_t bits) {
      const auto b = static_cast<std::uint16_t>(bits);
      return dtype == DataType::Float16 ? detail::HalfBitsToFloat(b) : detail::BFloat16BitsToFloat(b);
    };
    std::vector<float> every(65536);
    std::vector<float> narrowing;
    for (std::uint32_t bits = 0; bits < 65536; ++bits) {
      every[bits] = widen(bits);
      const std::uint32_t magnitude = bits & 0x7FFFu;
      const float next = widen(bits + 1);
      if (magnitude < 0x7FFFu && std::isfinite(every[bits]) && !std::isnan(next)) {
        // Halfway to the next value away from zero (to Inf past the largest finite value).
        const float half_way = std::isfinite(next) ? every[bits] + (next - every[bits]) / 2.0f
                                                   : every[bits] + (every[bits] - widen(bits - 1)) / 2.0f;
        narrowing.insert(narrowing.end(), {every[bits], half_way, std::nextafter(half_way, 0.0f),
                                           std::nextafter(half_way, 2.0f * half_way)});
      }
    }
    narrowing.insert(narrowing.end(), {1e30f, -1e30f, std::numeric_limits<float>::max(),
                                       std::numeric_limits<float>::denorm_min(), -0.0f});
    for (const auto& [values, from, to] :
         {std::tuple{every, dtype, DataType::Float32}, std::tuple{narrowing, DataType::Float32, dtype}}) {
      const std::vector<TensorPtr> cpu = {FromVector(values, {values.size()}, from)};
      const std::vector<TensorPtr> gpu = {FromVector(values, {values.size()}, from, kGpu)};
      std::vector<TensorPtr> cpu_dst = {Zeros({values.size()}, to)};
      std::vector<TensorPtr> gpu_dst = {Zeros({values.size()}, to, kGpu)};
      BOOST_TEST(CastInto(cpu, cpu_dst, 1.0f) == CastInto(gpu, gpu_dst, 1.0f));
      CheckSameBits(cpu_dst, gpu_dst);
    }
  }
}

BOOST_AUTO_TEST_CASE(PerTensorOperationsMatchCpu) {
  const std::vector<float> values = {1.0f, -2.5f, 0.1f, 60000.0f, -1e-6f, 3.0f, 1024.5f};
  for (const DataType dtype : kDtypes) {
    const TensorPtr cpu = FromVector(values, {values.size()}, dtype);
    const TensorPtr gpu = FromVector(values, {values.size()}, dtype, kGpu);
    BOOST_TEST(Bits(*cpu->Multiply(3.0f)) == Bits(*gpu->Multiply(3.0f)), boost::test_tools::per_element());
    BOOST_TEST(Bits(*cpu->Divide(7.0f)) == Bits(*gpu->Divide(7.0f)), boost::test_tools::per_element());
    BOOST_TEST(Bits(*cpu->Clone()) == Bits(*gpu->Clone()), boost::test_tools::per_element());
    BOOST_CHECK_THROW(gpu->Divide(0.0f), ArgumentError);
    for (const DataType target : kDtypes) {
      const TensorPtr cast = gpu->CastTo(target);
      BOOST_TEST((cast->GetDataType() == target));
      BOOST_TEST(cast->GetDevice() == kGpu);
      BOOST_TEST(Bits(*cpu->CastTo(target)) == Bits(*cast), boost::test_tools::per_element());
    }
    const TensorPtr cpu_copy = cpu->Clone();
    const TensorPtr gpu_copy = gpu->Clone();
    cpu_copy->MultiplyInPlace(2.0f);
    gpu_copy->MultiplyInPlace(2.0f);
    BOOST_TEST(Bits(*cpu_copy) == Bits(*gpu_copy), boost::test_tools::per_element());
    BOOST_TEST(Bits(*gpu) == Bits(*cpu), boost::test_tools::per_element());  // sources untouched
    BOOST_TEST(cpu_copy->HasInf() == gpu_copy->HasInf());
    BOOST_TEST(cpu_copy->HasNonFinite() == gpu_copy->HasNonFinite());
    BOOST_TEST(CloseRelative(cpu->SumOfSquares(), gpu->SumOfSquares(), 1e-6));
  }
  const TensorPtr nan = FromVector({1.0f, std::numeric_limits<float>::quiet_NaN()}, {2}, DataType::Float16, kGpu);
  BOOST_TEST(nan->HasNaN());
  BOOST_TEST(!nan->HasInf());
  BOOST_TEST(nan->HasNonFinite());
}

BOOST_AUTO_TEST_CASE(MixedCpuAndCudaListsAreGroupedByBackend) {
  Pair pair = MakeLists({10, 20}, Specials::None, 500);
  std::vector<TensorPtr> mixed = {pair.cpu[0], pair.gpu[1]};
  std::vector<TensorPtr> cpu_only = {pair.cpu[0]->Clone(), pair.cpu[1]};
  BOOST_TEST(UnscaleAndCheck(mixed, 0.25f) == UnscaleAndCheck(cpu_only, 0.25f));
  BOOST_TEST(Bits(*mixed[0]) == Bits(*cpu_only[0]), boost::test_tools::per_element());
  BOOST_TEST(Bits(*mixed[1]) == Bits(*cpu_only[1]), boost::test_tools::per_element());
  // A cast from CPU to CUDA goes through the per-tensor path and still matches.
  const TensorPtr dst = Zeros({10}, DataType::BFloat16, kGpu);
  const TensorPtr cpu_dst = Zeros({10}, DataType::BFloat16);
  CastInto(std::vector<TensorPtr>{pair.cpu[0]}, std::vector<TensorPtr>{dst}, 3.0f);
  CastInto(std::vector<TensorPtr>{pair.cpu[0]}, std::vector<TensorPtr>{cpu_dst}, 3.0f);
  BOOST_TEST(Bits(*dst) == Bits(*cpu_dst), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
