// The CPU backend's fused list operations on FP8 tensors, alone and mixed with the other dtypes,
// against the scalar reference (KernelReference.hpp): unscale, scale, non-finite check, sum of
// squares and casts into every dtype, with one and two threads, over lists whose sizes cross
// chunk boundaries, separately allocated and packed back to back. The SIMD tables leave the FP8
// slots to the portable kernels (KernelDispatch.cpp); this executable runs once per instruction
// set, so every table's completed slots are checked.
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <omp.h>

#include <boost/test/unit_test.hpp>

#include "core/KernelReference.hpp"

using namespace mlframework;
using namespace kernel_test;

namespace {

const float kFloat8Factors[] = {1.0f / 64.0f, 3.0f, 1.0f, 4096.0f};

void CheckAllFloat8Operations(const std::vector<TensorPtr>& list, const std::string& label) {
  ThreadCountGuard guard;
  const auto original = Snapshot(list);
  const bool non_finite = RefHasNonFinite(list);
  const double norm = RefSumOfSquares(list, 1.0f);
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    const std::string context =
        label + " threads=" + std::to_string(threads) + " isa=" + std::string(backends::cpu::InstructionSet());
    BOOST_TEST(HasNonFinite(list) == non_finite, context);
    const NonFiniteAndNorm got = CheckAndSumSquares(list, 1.0f);
    BOOST_TEST(got.FoundNonFinite == non_finite, context);
    if (non_finite) {
      BOOST_TEST(!std::isfinite(got.SumOfSquares), context);
    } else if (norm == 0.0) {
      BOOST_TEST(got.SumOfSquares == 0.0, context);
    } else {
      BOOST_TEST(std::abs(got.SumOfSquares - norm) / norm <= 1e-6, context);
    }
    for (const float factor : kFloat8Factors) {
      const std::string what = context + " factor=" + std::to_string(factor);
      auto unscaled = original;
      const bool found = RefUnscale(list, unscaled, factor);
      BOOST_TEST(UnscaleAndCheck(list, factor) == found, "unscale " << what);
      RequireSameBits(list, unscaled, "unscale " + what);
      Restore(list, original);
      ScaleInPlace(list, factor);
      RequireSameBits(list, unscaled, "scale " + what);
      Restore(list, original);
      for (const DataType target : kEveryType) {
        const auto dst = EmptyLike(list, target);
        auto expected = Snapshot(dst);
        const bool cast_found = RefCast(list, dst, expected, factor);
        const std::string cast = "cast to " + std::string(ToString(target)) + " " + what;
        BOOST_TEST(CastInto(list, dst, factor) == cast_found, cast);
        RequireSameBits(dst, expected, cast);
      }
      RequireSameBits(list, original, "casts leave the source untouched " + what);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(Float8Kernels)

BOOST_AUTO_TEST_CASE(RandomBitsOfEachFormat) {
  Rng rng(81);
  for (const DataType dtype : {DataType::Float8E4M3FN, DataType::Float8E5M2}) {
    const auto list = RandomList({dtype}, RandomSizes(rng), Fill::Bits, rng);
    CheckAllFloat8Operations(list, "random bits " + std::string(ToString(dtype)));
    CheckAllFloat8Operations(Packed(list), "packed random bits " + std::string(ToString(dtype)));
  }
}

BOOST_AUTO_TEST_CASE(MixedWithEveryDtype) {
  Rng rng(82);
  const std::vector<DataType> dtypes(std::begin(kEveryType), std::end(kEveryType));
  const auto list = RandomList(dtypes, RandomSizes(rng), Fill::Values, rng);
  CheckAllFloat8Operations(list, "mixed dtypes");
  CheckAllFloat8Operations(Packed(list), "packed mixed dtypes");
}

BOOST_AUTO_TEST_CASE(NonFiniteAtTheLastElement) {
  Rng rng(83);
  for (const DataType dtype : {DataType::Float8E4M3FN, DataType::Float8E5M2}) {
    const auto list = RandomList({dtype, DataType::Float16}, RandomSizes(rng), Fill::Values, rng);
    const auto clean = Snapshot(list);
    for (const NonFiniteValue& value : kNonFinite) {
      Restore(list, clean);
      SetElementBits(list.back(), list.back()->Size() - 1, value);
      BOOST_TEST_REQUIRE(RefHasNonFinite(list));
      CheckAllFloat8Operations(list, std::string(value.name) + " last in " + std::string(ToString(dtype)));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
