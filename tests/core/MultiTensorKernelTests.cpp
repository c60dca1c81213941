// The CPU backend's fused multi-tensor kernels against a plain scalar
// reference, on the instruction-set path this process dispatched to. CTest runs
// this executable once per path (MLFW_CPU_ISA=portable, avx2, avx512, avx512_bf16, avx512_fp16 and the
// automatic choice), so every compiled path is checked on the machine.
#include <omp.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ios>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/KernelReference.hpp"

using namespace mlframework;
using namespace kernel_test;

namespace {

const int kThreadCounts[] = {1, 2};
const float kFactors[] = {1.0f / 65536.0f, 3.0f, 65536.0f, 1.0f};
const float kNonFiniteFactors[] = {1.0f / 65536.0f, 3.0f};

std::string Describe(const char* op, int threads, float factor) {
  return std::string(op) + " threads=" + std::to_string(threads) + " factor=" + std::to_string(factor) +
         " isa=" + std::string(backends::cpu::InstructionSet());
}

bool SameBits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

// What the reference says one factor does to a list.
struct Expected {
  float factor;
  std::vector<Bytes> unscaled;
  bool unscale_found;
  std::vector<std::vector<Bytes>> cast;  // per target dtype
  std::vector<bool> cast_found;
};

// CastInto(src, dst, factor) with each of @p thread_counts, dst zeroed before each call, against
// the reference cast into separately allocated tensors of dst's dtype (one for the whole list).
void CheckCastInto(const std::vector<TensorPtr>& src, const std::vector<TensorPtr>& dst, float factor,
                   std::span<const int> thread_counts, const std::string& label) {
  const auto separate = EmptyLike(src, dst.front()->GetDataType());
  auto expected = Snapshot(separate);
  const bool found = RefCast(src, separate, expected, factor);
  for (const int threads : thread_counts) {
    omp_set_num_threads(threads);
    for (const auto& t : dst) {
      t->CopyFromFloats(std::vector<float>(t->Size(), 0.0f));
    }
    const std::string what = label + ", threads " + std::to_string(threads);
    BOOST_TEST(CastInto(src, dst, factor) == found, what);
    RequireSameBits(dst, expected, what);
  }
}

// Runs every fused operation on `list` (restored between runs) against the reference,
// with 1 and 2 OpenMP threads; the reference is computed once.
void CheckAllOperations(const std::vector<TensorPtr>& list, const char* label,
                        std::span<const float> factors = kFactors) {
  ThreadCountGuard guard;
  const auto original = Snapshot(list);
  const bool ref_non_finite = RefHasNonFinite(list);
  const float norm_factors[] = {1.0f, 1.0f / 1024.0f};
  const double ref_norm[] = {RefSumOfSquares(list, norm_factors[0]), RefSumOfSquares(list, norm_factors[1])};
  std::vector<Expected> expected;
  for (const float factor : factors) {
    Expected e{factor, original, false, {}, {}};
    e.unscale_found = RefUnscale(list, e.unscaled, factor);
    for (const DataType target : kAllTypes) {
      const auto dst = EmptyLike(list, target);
      auto bytes = Snapshot(dst);
      e.cast_found.push_back(RefCast(list, dst, bytes, factor));
      e.cast.push_back(std::move(bytes));
    }
    expected.push_back(std::move(e));
  }

  double norms[2][2] = {};
  for (const int threads : kThreadCounts) {
    omp_set_num_threads(threads);
    BOOST_TEST_CONTEXT(label << " threads=" << threads) {
      // 2. Non-finite check alone.
      BOOST_TEST(HasNonFinite(list) == ref_non_finite);

      // 3. Sum of squares with a scale, fused with the check.
      for (int k = 0; k < 2; ++k) {
        const double ref = ref_norm[k];
        const NonFiniteAndNorm got = CheckAndSumSquares(list, norm_factors[k]);
        norms[threads - 1][k] = got.SumOfSquares;
        BOOST_TEST(got.FoundNonFinite == ref_non_finite);
        if (ref_non_finite) {
          BOOST_TEST(!std::isfinite(got.SumOfSquares));
        } else if (ref == 0.0) {
          BOOST_TEST(got.SumOfSquares == 0.0);
        } else {
          BOOST_TEST(std::abs(got.SumOfSquares - ref) / ref <= 1e-6,
                     Describe("sum of squares", threads, norm_factors[k])
                         << " got " << got.SumOfSquares << " reference " << ref);
        }
        BOOST_TEST(SameBits(SumOfSquares(list, norm_factors[k]), got.SumOfSquares));
      }

      for (const Expected& e : expected) {
        // 1. Unscale in place + check.
        BOOST_TEST(UnscaleAndCheck(list, e.factor) == e.unscale_found, Describe("unscale", threads, e.factor));
        RequireSameBits(list, e.unscaled, Describe("unscale", threads, e.factor));

        // 4. Scale in place.
        Restore(list, original);
        ScaleInPlace(list, e.factor);
        RequireSameBits(list, e.unscaled, Describe("scale", threads, e.factor));
        Restore(list, original);

        // 5. Casts into every dtype, fused with the scale.
        for (std::size_t k = 0; k < std::size(kAllTypes); ++k) {
          const auto dst = EmptyLike(list, kAllTypes[k]);
          const std::string what = Describe("cast to ", threads, e.factor) + std::string(ToString(kAllTypes[k]));
          BOOST_TEST(CastInto(list, dst, e.factor) == e.cast_found[k], what);
          RequireSameBits(dst, e.cast[k], what);
        }
        RequireSameBits(list, original, Describe("casts leave the source untouched", threads, e.factor));
      }
    }
  }
  // The sums do not depend on the thread count, bit for bit.
  BOOST_TEST(SameBits(norms[0][0], norms[1][0]));
  BOOST_TEST(SameBits(norms[0][1], norms[1][1]));
}

// @p count sizes drawn from [lo, hi].
std::vector<std::size_t> SizesBetween(Rng& rng, std::size_t count, std::size_t lo, std::size_t hi) {
  std::vector<std::size_t> sizes(count);
  for (auto& s : sizes) {
    s = rng.Between(lo, hi);
  }
  return sizes;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(MultiTensorKernels)

BOOST_AUTO_TEST_CASE(BackToBackTensorsJoinedIntoOneSegment) {
  Rng rng(11);
  for (const DataType dtype : kAllTypes) {
    const auto packed = Packed(RandomList({dtype}, RandomSizes(rng), Fill::Values, rng));
    CheckAllOperations(packed, ("back to back " + std::string(ToString(dtype))).c_str());
    // A non-finite value right after a join, and in the last element.
    const auto clean = Snapshot(packed);
    SetElementBits(packed[6], 0, kNonFinite[1]);
    CheckAllOperations(packed, ("back to back, +Inf after a join " + std::string(ToString(dtype))).c_str(),
                       kNonFiniteFactors);
    Restore(packed, clean);
    SetElementBits(packed.back(), packed.back()->Size() - 1, kNonFinite[0]);
    CheckAllOperations(packed, ("back to back, NaN last " + std::string(ToString(dtype))).c_str(), kNonFiniteFactors);
  }
  // Runs of three dtypes one after the other: joins inside each run, never across dtypes.
  std::vector<TensorPtr> runs;
  for (const DataType dtype : {DataType::Float16, DataType::Float32, DataType::BFloat16}) {
    const auto run = RandomList({dtype}, RandomSizes(rng), Fill::Values, rng);
    runs.insert(runs.end(), run.begin(), run.end());
  }
  CheckAllOperations(Packed(runs), "back to back runs of three dtypes");
}

// A run of tensors back to back is one segment whichever thread planned which part of the list:
// the parts' plans are joined where a part's first tensor continues the previous part's last
// (backends/cpu/Planning.cpp, MakePlan). The sum of squares shows it: its FP32 partials are cut per
// segment, so an extra cut where a thread's part begins changes its last bits. Values with full
// significands, so that the partials round.
BOOST_AUTO_TEST_CASE(PartsPlannedOnEveryThreadJoinIntoOneRun) {
  ThreadCountGuard guard;
  Rng rng(29);
  const auto list = Packed(RandomList({DataType::Float32}, SizesBetween(rng, 3000, 1, 2000), Fill::Values, rng));
  for (const auto& t : list) {
    std::vector<float> values(t->Size());
    for (float& v : values) {
      v = 1.0f + static_cast<float>(rng.Between(0, (1 << 23) - 1)) * 0x1.0p-23f;
    }
    t->CopyFromFloats(values);
  }
  std::vector<double> sums;
  for (const int threads : {1, 2, 3, 4}) {
    omp_set_num_threads(threads);
    sums.push_back(SumOfSquares(list));
  }
  for (std::size_t k = 1; k < sums.size(); ++k) {
    BOOST_TEST(SameBits(sums[0], sums[k]),
               "threads " << k + 1 << ": " << std::hexfloat << sums[k] << " against " << sums[0]);
  }
}

// Lists of 1,024 tensors and more are planned on every thread, each thread a range of the list,
// and the ranges stitched together: the stitched plan must join exactly where one pass would.
BOOST_AUTO_TEST_CASE(LongListsPlannedOnEveryThreadMatchTheReference) {
  ThreadCountGuard guard;
  Rng rng(13);
  // Two back-to-back runs of one dtype in two buffers, 1,500 tensors each (empty ones among
  // them): with 2 threads the second range starts exactly where the second buffer does, which
  // must not join; with 3 threads both range boundaries fall inside a run, which must.
  std::vector<TensorPtr> list;
  for (int run = 0; run < 2; ++run) {
    const std::vector<std::size_t> sizes = SizesBetween(rng, 1500, 0, 40);
    const auto packed = Packed(RandomList({DataType::Float16}, sizes, Fill::Values, rng));
    list.insert(list.end(), packed.begin(), packed.end());
  }
  CheckAllOperations(list, "two long packed runs", std::span<const float>(kFactors).first(1));
  const auto original = Snapshot(list);
  auto expected = original;
  const bool found = RefUnscale(list, expected, 3.0f);
  omp_set_num_threads(3);
  BOOST_TEST(UnscaleAndCheck(list, 3.0f) == found);
  RequireSameBits(list, expected, "unscale, two long packed runs, 3 threads");
  Restore(list, original);

  // Runs of random dtypes and lengths with separate tensors between them, a +Inf in the middle.
  std::vector<TensorPtr> runs;
  while (runs.size() < 3001) {
    const DataType dtype = kAllTypes[rng.Between(0, 2)];
    const std::vector<std::size_t> sizes = SizesBetween(rng, rng.Between(1, 900), 0, 40);
    const auto run = Packed(RandomList({dtype}, sizes, Fill::Values, rng));
    runs.insert(runs.end(), run.begin(), run.end());
    runs.push_back(RandomList({dtype}, {rng.Between(1, 40)}, Fill::Values, rng)[0]);
  }
  std::size_t middle = runs.size() / 2;
  while (runs[middle]->Size() == 0) {
    ++middle;
  }
  SetElementBits(runs[middle], 0, kNonFinite[1]);
  CheckAllOperations(runs, "long packed runs, +Inf in the middle", kNonFiniteFactors);

  // Casts between two such lists: a pair joins only when both sides do. The destination's run
  // breaks where the second of 2 threads starts, while the source's run goes on.
  const auto src = Packed(RandomList({DataType::Float16}, std::vector<std::size_t>(2500, 17), Fill::Values, rng));
  auto dst = Packed(EmptyLike(src, DataType::Float32));
  dst[1250] = backends::cpu::Empty({17}, DataType::Float32);
  CheckCastInto(src, dst, 0.5f, std::array{1, 2, 3}, "long packed cast");
}

// Lists from memory (16 MiB and more) are visited in address order, whatever their own order
// (backends/cpu/AddressOrder.hpp): here the views of one FP32 buffer in reversed and then
// shuffled order, with separately allocated BF16 tensors among them. Sorted, runs of the views
// lie back to back again and join. Every result must match the reference for the list as given.
BOOST_AUTO_TEST_CASE(ListsFromMemoryVisitedInAddressOrder) {
  ThreadCountGuard guard;
  Rng rng(17);
  const std::vector<std::size_t> sizes = SizesBetween(rng, 2500, 0, 4096);
  const auto packed = Packed(RandomList({DataType::Float32}, sizes, Fill::Values, rng));  // about 20 MiB
  const auto separate = RandomList({DataType::BFloat16}, std::vector<std::size_t>(100, 777), Fill::Values, rng);
  // One permutation for the lists of this test: reversed, then 300 random swaps.
  std::vector<std::size_t> order(packed.size() + separate.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    order[i] = order.size() - 1 - i;
  }
  for (int k = 0; k < 300; ++k) {
    std::swap(order[rng.Between(0, order.size() - 1)], order[rng.Between(0, order.size() - 1)]);
  }
  const auto shuffled = [&](const std::vector<TensorPtr>& a, const std::vector<TensorPtr>& b) {
    std::vector<TensorPtr> all = a;
    all.insert(all.end(), b.begin(), b.end());
    std::vector<TensorPtr> out(order.size());
    for (std::size_t k = 0; k < order.size(); ++k) {
      out[k] = all[order[k]];
    }
    return out;
  };
  const auto list = shuffled(packed, separate);
  CheckAllOperations(list, "shuffled views of one buffer", std::span<const float>(kFactors).first(2));

  // A non-finite value in the tensor that lies lowest in memory, which the list holds near its end.
  const auto clean = Snapshot(list);
  std::size_t lowest = 0;
  while (packed[lowest]->Size() == 0) {
    ++lowest;
  }
  SetElementBits(packed[lowest], 0, kNonFinite[1]);
  CheckAllOperations(list, "shuffled views, +Inf lowest in memory", std::span<const float>(kNonFiniteFactors).first(1));
  Restore(list, clean);

  // Casts between two packed lists in the same shuffled order: sorted by the source, a pair joins
  // the previous one only where both sides lie back to back. One destination tensor is allocated
  // on its own, so both runs around it must stay apart.
  const auto packed_dst = Packed(EmptyLike(packed, DataType::Float16));
  auto dst = shuffled(packed_dst, EmptyLike(separate, DataType::Float16));
  dst[order.size() / 2] = backends::cpu::Empty(dst[order.size() / 2]->GetShape(), DataType::Float16);
  CheckCastInto(list, dst, 0.5f, kThreadCounts, "shuffled packed cast");
}

// A list out of address order keeps its ordered plan for the next calls (backends/cpu/PlanCaches.hpp, OrderCache), and
// only a list of the same layout may reuse it: two lists of the same sizes in the same reversed order over two buffers,
// called in turn; the first with one tensor swapped for another of the same size elsewhere; a cast from one source into
// two destinations.
BOOST_AUTO_TEST_CASE(AddressOrderReusedOnlyForTheSameLayout) {
  ThreadCountGuard guard;
  Rng rng(23);
  const std::vector<std::size_t> sizes = SizesBetween(rng, 2500, 1, 4096);  // about 20 MiB in FP32
  const auto a = Packed(RandomList({DataType::Float32}, sizes, Fill::Values, rng));
  const auto b = Packed(RandomList({DataType::Float32}, sizes, Fill::Values, rng));
  const auto reversed = [](std::vector<TensorPtr> list) {
    std::reverse(list.begin(), list.end());
    return list;
  };
  const auto list_a = reversed(a);
  const auto list_b = reversed(b);
  SetElementBits(b.front(), 0, kNonFinite[1]);  // +Inf lowest in b's memory, last in its list
  auto list_c = list_a;
  const std::size_t k = list_c.size() / 2;
  list_c[k] = RandomList({DataType::Float32}, {list_c[k]->Size()}, Fill::Values, rng)[0];
  SetElementBits(list_c[k], list_c[k]->Size() - 1, kNonFinite[0]);
  for (const int threads : kThreadCounts) {
    omp_set_num_threads(threads);
    for (int round = 0; round < 2; ++round) {
      const std::string what = "threads " + std::to_string(threads) + ", round " + std::to_string(round);
      BOOST_TEST(!HasNonFinite(list_a), what);
      BOOST_TEST(HasNonFinite(list_b), what);
      BOOST_TEST(HasNonFinite(list_c), what);
      BOOST_TEST(!HasNonFinite(list_a), what);
    }
  }
  CheckAllOperations(list_a, "reversed views, ordered plan reused", std::span<const float>(kFactors).first(2));

  // The same source into two destinations: the second cast must not reuse the first one's plan.
  const auto to_first = reversed(Packed(EmptyLike(a, DataType::BFloat16)));
  const auto to_second = reversed(Packed(EmptyLike(a, DataType::BFloat16)));
  for (const int threads : kThreadCounts) {
    for (const auto& dst : {to_first, to_second, to_first}) {
      CheckCastInto(list_a, dst, 0.25f, std::array{threads}, "cast into two destinations");
    }
  }
}

// The CPU backend keeps the plan of a list it planned twice (backends/cpu/PlanCaches.hpp, ListCache), and of a
// cast's two lists, keyed by their memory (address, count, dtype; KeptPlanTests.cpp covers lists wrapped anew). A
// kept plan says where the tensors are, never what they hold; it must be used only for exactly that memory in that
// order.
BOOST_AUTO_TEST_CASE(KeptPlansOnlyForTheSameLiveTensorsInOrder) {
  ThreadCountGuard guard;
  Rng rng(31);
  const std::vector<DataType> mixed = {DataType::Float32, DataType::Float16, DataType::BFloat16};

  // New values in a kept list's tensors are seen.
  const auto list = RandomList(mixed, SizesBetween(rng, 300, 1, 3000), Fill::Values, rng);
  for (int call = 0; call < 3; ++call) {
    BOOST_TEST(!HasNonFinite(list));
  }
  const auto finite = Snapshot(list);
  SetElementBits(list[150], list[150]->Size() - 1, kNonFinite[1]);
  BOOST_TEST(HasNonFinite(list));
  Restore(list, finite);
  CheckAllOperations(list, "kept list", std::span<const float>(kFactors).first(2));

  // Tensors that die with a kept list, and new ones that may take their addresses: a list of
  // one tensor 64 times (short lists are not kept) is called three times (kept at the second),
  // then dropped, and the next tensor most likely takes the dead one's address with another count and
  // dtype. A plan kept by address alone would read the next list with the dead tensor's count and dtype and miss its
  // non-finite value.
  for (int round = 0; round < 20; ++round) {
    const std::size_t size = 1 + std::size_t{97} * static_cast<std::size_t>(round);
    const TensorPtr one = RandomList({mixed[round % 3]}, {size}, Fill::Values, rng)[0];
    SetElementBits(one, size - 1, kNonFinite[round % 3]);
    const std::vector<TensorPtr> same(64, one);
    for (int call = 0; call < 3; ++call) {
      BOOST_TEST(HasNonFinite(same), "round " << round << ", call " << call);
    }
  }

  // The same tensors in another order are another list: two destinations of one size swapped.
  auto sizes = SizesBetween(rng, 100, 1, 1000);
  sizes[10] = sizes[90];
  const auto src = RandomList({DataType::Float32}, sizes, Fill::Values, rng);
  const auto dst = EmptyLike(src, DataType::BFloat16);
  auto swapped = dst;
  std::swap(swapped[10], swapped[90]);
  for (const auto& to : {dst, dst, dst, swapped, dst, swapped}) {
    CheckCastInto(src, to, 0.5f, kThreadCounts, "destinations in two orders");
  }

  // Lists kept while other threads plan and keep theirs (each thread's calls fork their own
  // OpenMP teams).
  const auto other = RandomList(mixed, SizesBetween(rng, 2000, 1, 500), Fill::Values, rng);
  SetElementBits(other.back(), 0, kNonFinite[0]);
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int call = 0; call < 50; ++call) {
        const bool expected = t % 2 == 1;
        if (HasNonFinite(t % 2 == 0 ? list : other) != expected) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  BOOST_TEST(wrong.load() == 0);
}

BOOST_AUTO_TEST_CASE(CastBetweenTwoBackToBackListsMatchesTheReference) {
  ThreadCountGuard guard;
  Rng rng(12);
  for (const DataType from : kAllTypes) {
    for (const DataType to : kAllTypes) {
      const auto src = Packed(RandomList({from}, RandomSizes(rng), Fill::Values, rng));
      const auto dst = Packed(EmptyLike(src, to));
      CheckCastInto(src, dst, 1.0f / 1024.0f, kThreadCounts,
                    std::string(ToString(from)) + " to " + std::string(ToString(to)));
    }
  }
}

BOOST_AUTO_TEST_CASE(GapsBetweenViewsAreNeverTouched) {
  // Views with a gap between them (elements 10 and 11), the rest back to back: the gap holds
  // NaN, which no operation may see or change.
  ThreadCountGuard guard;
  for (const DataType dtype : kAllTypes) {
    for (const int threads : kThreadCounts) {
      omp_set_num_threads(threads);
      const std::vector<float> nans(50, NAN);
      const TensorPtr base = FromVector(nans, {50}, dtype);
      const std::vector<TensorPtr> list = {backends::cpu::View(base, 0, {10}), backends::cpu::View(base, 12, {18}),
                                           backends::cpu::View(base, 30, {20})};
      for (const auto& t : list) {
        t->CopyFromFloats(std::vector<float>(t->Size(), 2.0f));
      }
      BOOST_TEST(!HasNonFinite(list));
      BOOST_TEST(SumOfSquares(list) == 4.0 * 48);
      BOOST_TEST(!UnscaleAndCheck(list, 0.5f));
      ScaleInPlace(list, 4.0f);
      const TensorPtr out_base = FromVector(nans, {50}, DataType::Float32);
      const std::vector<TensorPtr> out = {backends::cpu::View(out_base, 0, {10}),
                                          backends::cpu::View(out_base, 12, {18}),
                                          backends::cpu::View(out_base, 30, {20})};
      BOOST_TEST(!CastInto(list, out, 0.25f));
      const auto values = base->ToFloatVector();
      const auto cast = out_base->ToFloatVector();
      for (std::size_t i = 0; i < 50; ++i) {
        const bool gap = i == 10 || i == 11;
        BOOST_TEST((gap ? std::isnan(values[i]) : values[i] == 4.0f), "element " << i);
        BOOST_TEST((gap ? std::isnan(cast[i]) : cast[i] == 1.0f), "cast element " << i);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(DispatchesTheRequestedInstructionSet) {
  const std::string requested = RequestedIsa();
  const std::string_view active = backends::cpu::InstructionSet();
  BOOST_TEST_MESSAGE("MLFW_CPU_ISA='" << requested << "', dispatched to " << active);
#if defined(__x86_64__)
  const bool has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
  unsigned int eax = 0;
  unsigned int ebx = 0;
  unsigned int ecx = 0;
  unsigned int edx = 0;
  const bool has_f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c;
  const bool has_avx512_bf16 = has_avx512 && __builtin_cpu_supports("avx512bf16");
  // AVX512_FP16 from CPUID leaf 7 (EDX bit 23), for the same reason.
  const bool has_avx512_fp16 =
      has_avx512_bf16 && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (edx & (1u << 23)) != 0;
#else
  const bool has_avx512 = false;
  const bool has_avx2 = false;
  const bool has_avx512_bf16 = false;
  const bool has_avx512_fp16 = false;
#endif
  const std::string best = has_avx512_fp16   ? "avx512_fp16"
                           : has_avx512_bf16 ? "avx512_bf16"
                           : has_avx512      ? "avx512"
                                             : (has_avx2 ? "avx2" : "portable");
  if (requested.empty()) {
    BOOST_TEST(active == best);
  } else if (requested == "portable" || (requested == "avx2" && has_avx2) || (requested == "avx512" && has_avx512) ||
             (requested == "avx512_bf16" && has_avx512_bf16) || (requested == "avx512_fp16" && has_avx512_fp16)) {
    BOOST_TEST(active == requested);
  } else {
    // Never forced onto instructions the CPU lacks: the best supported path runs instead.
    BOOST_TEST_MESSAGE("this CPU lacks " << requested << ": its kernels are NOT tested in this run");
    BOOST_TEST(active == best);
  }
}

BOOST_AUTO_TEST_CASE(SoftwarePrefetchAsRequested) {
  // MLFW_CPU_PREFETCH=1 or 0 forces the software prefetch of calls from memory on or off (the
  // kernel tests run once each way, tests/core/CMakeLists.txt); without it, AMD CPUs run without.
  const char* env = std::getenv("MLFW_CPU_PREFETCH");
  const std::string requested = env == nullptr ? "" : env;
  const bool on = backends::cpu::SoftwarePrefetch();
  BOOST_TEST_MESSAGE("MLFW_CPU_PREFETCH='" << requested << "', software prefetch " << (on ? "on" : "off") << ", "
                                           << backends::cpu::InstructionSet());
  if (backends::cpu::InstructionSet() == "portable") {
    BOOST_TEST(!on);  // scalar loops have no prefetch to turn on
  } else if (requested == "1" || requested == "0") {
    BOOST_TEST(on == (requested == "1"));
  } else {
#if defined(__x86_64__)
    BOOST_TEST(on == !__builtin_cpu_is("amd"));
#else
    BOOST_TEST(on);
#endif
  }
}

BOOST_AUTO_TEST_CASE(RandomBitPatternsEveryDtype) {
  Rng rng(1);
  for (const DataType dtype : kAllTypes) {
    const auto list = RandomList({dtype}, RandomSizes(rng), Fill::Bits, rng);
    CheckAllOperations(list, ("random bits " + std::string(ToString(dtype))).c_str());
  }
}

BOOST_AUTO_TEST_CASE(GradientLikeValuesEveryDtype) {
  Rng rng(2);
  for (const DataType dtype : kAllTypes) {
    const auto list = RandomList({dtype}, RandomSizes(rng), Fill::Values, rng);
    // Both outcomes of the flag must be exercised: these values stay finite after unscaling.
    auto copy = Snapshot(list);
    BOOST_TEST(!RefUnscale(list, copy, 1.0f / 65536.0f));
    CheckAllOperations(list, ("gradient values " + std::string(ToString(dtype))).c_str());
  }
}

BOOST_AUTO_TEST_CASE(MixedDtypeList) {
  Rng rng(3);
  const auto list =
      RandomList({DataType::Float16, DataType::Float32, DataType::BFloat16}, RandomSizes(rng), Fill::Values, rng);
  CheckAllOperations(list, "mixed dtypes");
}

BOOST_AUTO_TEST_CASE(NonFiniteAtFirstAndLastElementOfLastTensor) {
  Rng rng(4);
  for (const DataType dtype : kAllTypes) {
    const auto list = RandomList({dtype}, RandomSizes(rng), Fill::Values, rng);
    const auto clean = Snapshot(list);
    for (const NonFiniteValue& value : kNonFinite) {
      for (const bool at_last : {false, true}) {
        const TensorPtr& last = list.back();
        Restore(list, clean);
        SetElementBits(last, at_last ? last->Size() - 1 : 0, value);
        BOOST_TEST_REQUIRE(RefHasNonFinite(list));
        const std::string label =
            std::string(value.name) + (at_last ? " at last " : " at first ") + std::string(ToString(dtype));
        CheckAllOperations(list, label.c_str(), kNonFiniteFactors);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(EmptyListsAndEmptyTensors) {
  const std::vector<TensorPtr> none;
  BOOST_TEST(!UnscaleAndCheck(none, 2.0f));
  BOOST_TEST(!HasNonFinite(none));
  BOOST_TEST(SumOfSquares(none) == 0.0);
  const std::vector<TensorPtr> empties = {backends::cpu::Empty({0}, DataType::Float16),
                                          backends::cpu::Empty({0}, DataType::Float32)};
  CheckAllOperations(empties, "only empty tensors");
  Rng rng(5);
  for (const DataType dtype : kAllTypes) {
    const auto single = RandomList({dtype}, {1}, Fill::Values, rng);
    CheckAllOperations(single, "one element");
  }
}

BOOST_AUTO_TEST_CASE(HugeFiniteValuesOverflowTheFp32PartialButNotTheResult) {
  // Squares of 1e30 overflow FP32; the kernel must fall back to FP64 for such pieces.
  const std::vector<TensorPtr> list = {FromVector({1e30f, -2e30f, 3.0f}, {3}, DataType::Float32),
                                       FromVector({1e38f}, {1}, DataType::BFloat16)};
  const NonFiniteAndNorm got = CheckAndSumSquares(list);
  BOOST_TEST(!got.FoundNonFinite);
  const double ref = RefSumOfSquares(list, 1.0f);
  BOOST_TEST(std::isfinite(got.SumOfSquares));
  BOOST_TEST(std::abs(got.SumOfSquares - ref) / ref <= 1e-6);
}

BOOST_AUTO_TEST_CASE(TenThousandSmallTensors) {
  // 10,000 tensors of 1K-4K elements (about 25M in all), the dtypes taking turns, so
  // most chunks hold pieces of several tensors of different dtypes. About 65 MiB: the
  // operations run the from_memory kernels (MultiTensorKernels.hpp, kFromMemoryBytes).
  ThreadCountGuard guard;
  Rng rng(6);
  const std::vector<std::size_t> sizes = SizesBetween(rng, 10000, 1024, 4096);
  const auto list = RandomList({DataType::Float32, DataType::Float16, DataType::BFloat16}, sizes, Fill::Values, rng);
  const auto original = Snapshot(list);
  const double ref = RefSumOfSquares(list, 1.0f);
  auto expected = original;
  const bool ref_found = RefUnscale(list, expected, 1.0f / 1024.0f);
  double sums[2] = {};
  for (const int threads : kThreadCounts) {
    BOOST_TEST_CONTEXT("threads=" << threads) {
      omp_set_num_threads(threads);
      const NonFiniteAndNorm got = CheckAndSumSquares(list);
      BOOST_TEST(!got.FoundNonFinite);
      BOOST_TEST(std::abs(got.SumOfSquares - ref) / ref <= 1e-6);
      sums[threads - 1] = got.SumOfSquares;
      BOOST_TEST(UnscaleAndCheck(list, 1.0f / 1024.0f) == ref_found);
      RequireSameBits(list, expected, "unscale, threads " + std::to_string(threads));
      Restore(list, original);
      ScaleInPlace(list, 1.0f / 1024.0f);
      RequireSameBits(list, expected, "scale, threads " + std::to_string(threads));
      Restore(list, original);
      BOOST_TEST(!HasNonFinite(list));
      // A NaN in the very last element: found although every chunk before it is clean.
      SetElementBits(list.back(), list.back()->Size() - 1, kNonFinite[0]);
      BOOST_TEST(HasNonFinite(list));
      BOOST_TEST(CheckAndSumSquares(list).FoundNonFinite);
      SetBytes(list.back(), original.back());
    }
  }
  BOOST_TEST(SameBits(sums[0], sums[1]));  // bit-identical for 1 and 2 threads
}

BOOST_AUTO_TEST_CASE(Fp32SumOfSquaresOfConstantValues) {
  // Every value 0.1f, where FP32 accumulation drifts most: each addition rounds the same way, and
  // one FP32 sum per lane over a chunk was off by 5e-6. The SIMD loops sum squares in FP32 for a
  // block of 16 vectors at most and add the blocks in FP64 (from cache), or sum in FP64 outright
  // (from memory, SumSquaresWide), so what is left is each piece's FP32 partial: at most 2^-24
  // relative. Packed views, so pieces start anywhere in a vector and the masked head and tail
  // loads are exercised: about 4 MiB (the cached kernels) and about 24 MiB (from memory).
  ThreadCountGuard guard;
  Rng rng(31);
  for (const std::size_t tensors : {std::size_t{500}, std::size_t{3000}}) {
    const auto list = Packed(RandomList({DataType::Float32}, SizesBetween(rng, tensors, 1, 4000), Fill::Values, rng));
    for (const auto& t : list) {
      t->CopyFromFloats(std::vector<float>(t->Size(), 0.1f));
    }
    BOOST_TEST_REQUIRE(reinterpret_cast<std::uintptr_t>(backends::cpu::Data(*list[1])) % 64 != 0);
    const auto clean = Snapshot(list);
    const auto check = [&](const std::string& what, bool non_finite) {
      const double ref = RefSumOfSquares(list, 1.0f);
      double sums[2] = {};
      for (const int threads : kThreadCounts) {
        omp_set_num_threads(threads);
        const NonFiniteAndNorm got = CheckAndSumSquares(list);
        BOOST_TEST(got.FoundNonFinite == non_finite, what << ", threads " << threads);
        if (non_finite) {
          BOOST_TEST(!std::isfinite(got.SumOfSquares), what << ", threads " << threads);
        } else {
          BOOST_TEST(std::abs(got.SumOfSquares - ref) / ref <= 1e-7,
                     what << ", threads " << threads << ": got " << got.SumOfSquares << " reference " << ref);
        }
        sums[threads - 1] = got.SumOfSquares;
      }
      BOOST_TEST(SameBits(sums[0], sums[1]), what);
    };
    const std::string size = std::to_string(tensors) + " tensors, ";
    check(size + "clean", false);
    // A square too large for FP32 (the piece's FP32 partial overflows): the result stays exact.
    const std::size_t middle = tensors / 2;
    static_cast<float*>(backends::cpu::MutableData(*list[middle]))[list[middle]->Size() / 2] = 3e30f;
    check(size + "3e30 inside", false);
    Restore(list, clean);
    // Inf as the first element of an unaligned piece (the masked head), NaN as the very last
    // element (the masked tail), -Inf in the middle of a long run.
    SetElementBits(list[1], 0, kNonFinite[1]);
    check(size + "+Inf first in a piece", true);
    Restore(list, clean);
    SetElementBits(list.back(), list.back()->Size() - 1, kNonFinite[0]);
    check(size + "NaN last", true);
    Restore(list, clean);
    SetElementBits(list[middle + 1], list[middle + 1]->Size() / 2, kNonFinite[2]);
    check(size + "-Inf inside", true);
  }
}

BOOST_AUTO_TEST_CASE(CastsLargeEnoughToStream) {
  // Casts over 16 MiB and more (source and destination together) write with non-temporal
  // stores (MultiTensorKernels.hpp, kFromMemoryBytes): small tensors around a large one, with odd lengths, so
  // unaligned heads and masked tails of many pieces meet within the streaming chunks. Into
  // tensors allocated one by one (each starts on a line) and into one packed buffer (tensors
  // start anywhere in a line, so only the whole lines inside each one are streamed).
  ThreadCountGuard guard;
  Rng rng(8);
  std::vector<std::size_t> sizes = SizesBetween(rng, 600, 1, 4096);
  sizes[300] = (std::size_t{8} << 20) + 3;  // alone past 16 MiB as FP16
  const auto list = RandomList({DataType::Float32}, sizes, Fill::Values, rng);
  for (const DataType target : {DataType::Float16, DataType::BFloat16, DataType::Float32}) {
    for (const bool packed : {false, true}) {
      const auto dst = packed ? ZerosContiguousLike(list, target) : EmptyLike(list, target);
      auto expected = Snapshot(dst);
      const bool found = RefCast(list, dst, expected, 1.0f / 1024.0f);
      for (const int threads : kThreadCounts) {
        omp_set_num_threads(threads);
        const std::string what = Describe("streaming cast to ", threads, 1.0f / 1024.0f) +
                                 std::string(ToString(target)) + (packed ? " (packed)" : "");
        BOOST_TEST(CastInto(list, dst, 1.0f / 1024.0f) == found, what);
        RequireSameBits(dst, expected, what);
      }
      // An Inf in each part of the large piece: its first element (packed: in the partial line
      // before the streamed ones, which takes ordinary stores), one in the streamed lines, and
      // its last (in the partial line after them). Each part's flag must reach the result.
      if (packed) {
        BOOST_TEST_REQUIRE(reinterpret_cast<std::uintptr_t>(backends::cpu::Data(*dst[300])) % 64 != 0);
      }
      auto* big = static_cast<float*>(backends::cpu::MutableData(*list[300]));
      for (const std::size_t at : {std::size_t{0}, sizes[300] / 2, sizes[300] - 1}) {
        const float kept = big[at];
        big[at] = std::numeric_limits<float>::infinity();
        for (const int threads : kThreadCounts) {
          omp_set_num_threads(threads);
          BOOST_TEST(CastInto(list, dst, 1.0f / 1024.0f),
                     Describe("streaming cast to ", threads, 1.0f / 1024.0f) + std::string(ToString(target)) +
                         (packed ? " (packed)" : "") + " with Inf at " + std::to_string(at));
        }
        big[at] = kept;
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(SumOfSquaresAt64MElements) {
  ThreadCountGuard guard;
  constexpr std::size_t kCount = std::size_t{64} << 20;
  Rng rng(7);
  auto tensor = backends::cpu::Empty({kCount}, DataType::Float32);
  auto* data = static_cast<float*>(backends::cpu::MutableData(*tensor));
  double ref = 0.0;
  for (std::size_t i = 0; i < kCount; ++i) {
    // Positive, same order of magnitude everywhere: the case where FP32 accumulation drifts most.
    data[i] = static_cast<float>(rng.Unit());
    ref += static_cast<double>(data[i]) * static_cast<double>(data[i]);
  }
  const std::vector<TensorPtr> list = {tensor};
  double sums[2] = {};
  for (const int threads : kThreadCounts) {
    omp_set_num_threads(threads);
    sums[threads - 1] = SumOfSquares(list);
    const double error = std::abs(sums[threads - 1] - ref) / ref;
    BOOST_TEST_MESSAGE("64M elements, " << threads << " thread(s), " << backends::cpu::InstructionSet()
                                        << ": relative error " << error);
    BOOST_TEST(error <= 1e-6);
  }
  BOOST_TEST(SameBits(sums[0], sums[1]));
}

BOOST_AUTO_TEST_SUITE_END()
