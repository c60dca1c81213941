// The amax passes (MultiTensor.hpp: UnscaleCheckAndAmax, CheckAndAmax, CastIntoAndAmax) against a
// scalar reference, on the instruction-set path this process dispatched to: CTest runs this
// executable once per path (MLFW_CPU_ISA), with and without software prefetch. The amax is a
// maximum, so it must match the reference bit for bit whatever the threads and chunks; the
// values written and the flag must be exactly those of the passes without the amax.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/KernelReference.hpp"

using namespace mlframework;
using namespace kernel_test;

namespace {

const float kAmaxFactors[] = {1.0f / 65536.0f, 3.0f, 1.0f, 65536.0f};

std::string Label(const char* op, int threads, float factor) {
  return std::string(op) + " threads=" + std::to_string(threads) + " factor=" + std::to_string(factor) +
         " isa=" + std::string(backends::cpu::InstructionSet());
}

// The largest finite |x * factor| over @p list, x as the kernels load it.
float RefAmax(const std::vector<TensorPtr>& list, float factor) {
  float amax = 0.0f;
  for (const auto& t : list) {
    const Bytes bytes = BytesOf(t);
    for (std::size_t i = 0; i < t->Size(); ++i) {
      const float v = std::fabs(RefMultiply(RefLoad(t->GetDataType(), bytes.data(), i), factor));
      if (std::isfinite(v)) amax = std::max(amax, v);
    }
  }
  return amax;
}

void RequireSameAmax(float actual, float expected, const std::string& label) {
  BOOST_TEST_INFO(label << " amax " << actual << " expected " << expected);
  BOOST_TEST(std::bit_cast<std::uint32_t>(actual) == std::bit_cast<std::uint32_t>(expected));
}

// Tensors of @p sizes whose elements start @p offset elements into a larger buffer (views), so the
// heads and tails of every alignment are covered.
std::vector<TensorPtr> OffsetList(const std::vector<DataType>& dtypes, const std::vector<std::size_t>& sizes,
                                  std::size_t offset, Rng& rng) {
  std::vector<TensorPtr> list;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const DataType dtype = dtypes[t % dtypes.size()];
    const TensorPtr base =
        MakeTensor(dtype, sizes[t] + offset, [&](std::size_t) { return RandomValueBits(dtype, rng); });
    list.push_back(backends::cpu::View(base, offset, {sizes[t]}));
  }
  return list;
}

// Every check of one list: the unscale (bits, flag, amax against the reference and against the
// plain pass), the read-only check and the casts into every dtype.
void CheckList(const std::vector<TensorPtr>& list, const std::string& what) {
  ThreadCountGuard guard;
  const auto original = Snapshot(list);
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (const float factor : kAmaxFactors) {
      const std::string label = what + " " + Label("unscale", threads, factor);
      Restore(list, original);
      auto expected = Snapshot(list);
      const bool expected_found = RefUnscale(list, expected, factor);
      const float expected_amax = RefAmax(list, factor);
      const NonFiniteAndAmax result = UnscaleCheckAndAmax(list, factor);
      BOOST_TEST_INFO(label);
      BOOST_TEST(result.FoundNonFinite == expected_found);
      RequireSameAmax(result.Amax, expected_amax, label);
      RequireSameBits(list, expected, label);
      // The plain pass writes the same bits and reports the same flag.
      Restore(list, original);
      BOOST_TEST(UnscaleAndCheck(list, factor) == expected_found);
      RequireSameBits(list, expected, label + " (plain)");

      Restore(list, original);
      for (const DataType target : kAllTypes) {
        std::vector<TensorPtr> dst;
        dst.reserve(list.size());
        for (const auto& t : list) dst.push_back(backends::cpu::Empty(t->GetShape(), target));
        auto cast_expected = Snapshot(dst);
        const bool cast_found = RefCast(list, dst, cast_expected, factor);
        const NonFiniteAndAmax cast = CastIntoAndAmax(list, dst, factor);
        const std::string cast_label =
            what + " " + Label("cast", threads, factor) + " to " + std::string(ToString(target));
        BOOST_TEST_INFO(cast_label);
        BOOST_TEST(cast.FoundNonFinite == cast_found);
        RequireSameAmax(cast.Amax, expected_amax, cast_label);
        RequireSameBits(dst, cast_expected, cast_label);
      }
    }
    Restore(list, original);
    const NonFiniteAndAmax checked = CheckAndAmax(list);
    BOOST_TEST_INFO(what << " " << Label("check", threads, 1.0f));
    BOOST_TEST(checked.FoundNonFinite == RefHasNonFinite(list));
    RequireSameAmax(checked.Amax, RefAmax(list, 1.0f), what + " " + Label("check", threads, 1.0f));
  }
  Restore(list, original);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(AmaxKernels)

BOOST_AUTO_TEST_CASE(EveryDtypeOddSizesAndAlignments) {
  Rng rng(29);
  for (const DataType dtype : kAllTypes) {
    for (const std::size_t offset : {0u, 1u, 3u, 7u}) {
      const auto list = OffsetList({dtype}, RandomSizes(rng), offset, rng);
      CheckList(list, std::string(ToString(dtype)) + " offset=" + std::to_string(offset));
    }
  }
}

BOOST_AUTO_TEST_CASE(MixedDtypesAndEveryBitPattern) {
  Rng rng(4);
  const auto list =
      RandomList({DataType::Float16, DataType::Float32, DataType::BFloat16}, RandomSizes(rng), Fill::Bits, rng);
  CheckList(list, "mixed bits");
}

BOOST_AUTO_TEST_CASE(NonFiniteValuesAreLeftOut) {
  for (const DataType dtype : kAllTypes) {
    for (const NonFiniteValue& value : kNonFinite) {
      Rng rng(7);
      auto list = RandomList({dtype}, {1, 17, 40000, 5}, Fill::Values, rng);
      // The non-finite value first, in the middle and last, and one tensor of it alone.
      SetElementBits(list[1], 0, value);
      SetElementBits(list[2], 20001, value);
      SetElementBits(list[3], 4, value);
      SetElementBits(list[0], 0, value);
      const std::string what = std::string(ToString(dtype)) + " " + value.name;
      CheckList(list, what);
      const NonFiniteAndAmax result = CheckAndAmax(list);
      BOOST_TEST(result.FoundNonFinite);
      BOOST_TEST(result.Amax > 0.0f);  // the finite values still count
    }
  }
}

BOOST_AUTO_TEST_CASE(OnlyNonFiniteValuesGiveZero) {
  for (const DataType dtype : kAllTypes) {
    const auto t = MakeTensor(dtype, 9, [&](std::size_t i) {
      const NonFiniteValue& v = kNonFinite[i % 3];
      return dtype == DataType::Float32 ? v.f32 : dtype == DataType::Float16 ? v.f16 : v.bf16;
    });
    const std::vector<TensorPtr> list{t};
    const NonFiniteAndAmax result = CheckAndAmax(list);
    BOOST_TEST(result.FoundNonFinite);
    BOOST_TEST(result.Amax == 0.0f);
    const NonFiniteAndAmax empty = CheckAndAmax(std::vector<TensorPtr>{});
    BOOST_TEST(!empty.FoundNonFinite);
    BOOST_TEST(empty.Amax == 0.0f);
  }
}

// A product that overflows FP32 is not finite: it sets the flag and stays out of the amax.
BOOST_AUTO_TEST_CASE(ProductsThatOverflowAreLeftOut) {
  const std::vector<TensorPtr> list{FromVector({2.0f, 3.0e38f, -1.0f}, {3})};
  const NonFiniteAndAmax result = UnscaleCheckAndAmax(list, 4.0f);
  BOOST_TEST(result.FoundNonFinite);
  BOOST_TEST(result.Amax == 8.0f);
}

// Many small tensors, the same list passed three times: the third call runs the kept plan.
BOOST_AUTO_TEST_CASE(ManyTensorsAndKeptPlans) {
  Rng rng(11);
  std::vector<std::size_t> sizes;
  sizes.reserve(300);
  for (int i = 0; i < 300; ++i) sizes.push_back(rng.Between(0, 700));
  const auto list = RandomList({DataType::Float32, DataType::Float16}, sizes, Fill::Values, rng);
  const auto original = Snapshot(list);
  const float expected = RefAmax(list, 0.25f);
  for (int pass = 0; pass < 3; ++pass) {
    Restore(list, original);
    RequireSameAmax(UnscaleCheckAndAmax(list, 0.25f).Amax, expected, "pass " + std::to_string(pass));
  }
  CheckList(list, "300 tensors");
}

// Over 16 MiB: the kernels for memory (prefetch, streaming stores of the cast).
BOOST_AUTO_TEST_CASE(ListsFromMemory) {
  Rng rng(5);
  const std::size_t n = (std::size_t{17} << 20) / 4 + 13;
  auto list = RandomList({DataType::Float32}, {n, 31}, Fill::Values, rng);
  SetElementBits(list[0], n / 2, kNonFinite[1]);
  const auto original = Snapshot(list);
  const float expected = RefAmax(list, 0.5f);
  const NonFiniteAndAmax result = UnscaleCheckAndAmax(list, 0.5f);
  BOOST_TEST(result.FoundNonFinite);
  RequireSameAmax(result.Amax, expected, "unscale from memory");
  Restore(list, original);
  std::vector<TensorPtr> dst{backends::cpu::Empty({n}, DataType::Float32),
                             backends::cpu::Empty({31}, DataType::Float32)};
  auto cast_expected = Snapshot(dst);
  RefCast(list, dst, cast_expected, 0.5f);
  const NonFiniteAndAmax cast = CastIntoAndAmax(list, dst, 0.5f);
  BOOST_TEST(cast.FoundNonFinite);
  RequireSameAmax(cast.Amax, expected, "cast from memory");
  RequireSameBits(dst, cast_expected, "cast from memory");
  RequireSameAmax(CheckAndAmax(list).Amax, RefAmax(list, 1.0f), "check from memory");
}

BOOST_AUTO_TEST_CASE(CastArgumentsAreChecked) {
  const std::vector<TensorPtr> src{FromVector({1.0f, 2.0f}, {2})};
  const std::vector<TensorPtr> two{Zeros({2}), Zeros({2})};
  const std::vector<TensorPtr> shape{Zeros({3})};
  const std::vector<TensorPtr> null{nullptr};
  BOOST_CHECK_THROW(CastIntoAndAmax(src, two), ArgumentError);
  BOOST_CHECK_THROW(CastIntoAndAmax(src, shape), ArgumentError);
  BOOST_CHECK_THROW(CastIntoAndAmax(src, null), ArgumentNullError);
  BOOST_CHECK_THROW(UnscaleCheckAndAmax(null, 1.0f), ArgumentNullError);
  BOOST_CHECK_THROW(CheckAndAmax(null), ArgumentNullError);
}

BOOST_AUTO_TEST_SUITE_END()
