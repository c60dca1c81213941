#pragma once
// Private: the element loops shared by the SIMD kernel tables, written once over the operations
// type `Ops` of an instruction set (Avx2Ops in KernelsAvx2.cpp, Avx512Ops in Avx512Ops.hpp),
// which MakeTable below instantiates for an instruction-set tag (InstructionSets.hpp). The
// operations types live in anonymous namespaces, so every instantiation is local to the file
// compiled with that instruction set's flags and the linker can never mix them up.
//
// An `Ops` provides, for each DataType D:
//   Ops::kWidth                       floats per Ops::Batch (an xsimd::batch<float, Arch>)
//   Ops::Load<D>(p)                   kWidth elements widened exactly to FP32
//   Ops::LoadPartial<D>(p, n)         n < kWidth elements, the other lanes zero
//   Ops::Store<D>(p, v, flag)         round v to D (FloatBits.hpp rounding), store kWidth
//                                     elements, fold their exponent fields into flag
//   Ops::StorePartial<D>(p, n, v, flag)  the same for the first n lanes only
//   Ops::CheckBlock<D>(p, flag)       fold the exponent fields of Ops::kCheckElements<D> stored
//                                     elements into an Ops::CheckFlag (read-only check, no
//                                     conversion); Ops::NoCheckFlag<D>(), Ops::MergeChecks<D>(a, b),
//                                     Ops::AnyNonFiniteChecked<D>(flag)
//   Ops::CheckPartial<D>(p, n, flag)  the same for n < kCheckElements<D> elements
//   Ops::Store<D, true>(p, v, flag)   Store to a vector-aligned p with non-temporal stores
//   Ops::Flag, Ops::NoFlag<D>(), Ops::AnyNonFinite<D>(flag), Ops::Merge<D>(a, b) (lane-wise max)
//   Ops::WideBatch                    an xsimd batch of kWidth / 2 doubles
//   Ops::LoadWide(p), Ops::Widen(v)   kWidth FP32 elements at p (or the lanes of v) widened
//                                     exactly to FP64, as a pair of WideBatch halves
//   Ops::kPrefetch                    true for the KernelTable::from_memory set: the loops prefetch
//                                     a page ahead (PrefetchLines / PrefetchAhead below); false
//                                     for the cached and from_memory_no_prefetch sets
//   Ops::kWordKernels                 true when the Ops has ScaleWords<D>(p, count, factor, found):
//                                     an in-place 16-bit scale that returns false, writing
//                                     nothing, when it is not exact for that factor
//   Ops::kBf16WordSums                true when the Ops has SumSquaresBf16Words(p, count), the
//                                     BF16 sum of squares on the words
// The flag keeps the lane-wise maximum of the masked exponent fields; a lane
// reaching the all-ones exponent means Inf or NaN, exactly the scalar test.
// Function-local code only: no out-of-line helper from a shared header may be
// instantiated here with this file's instruction set.

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include <xsimd/xsimd.hpp>

#include <mlframework/core/DataType.hpp>

namespace mlframework::backends::cpu::simd {

template <DataType D>
struct ElementOf {
  using type = std::uint16_t;  // FP16 and BF16 are stored as 16-bit words
};
template <>
struct ElementOf<DataType::Float32> {
  using type = float;
};
template <DataType D>
using Element = typename ElementOf<D>::type;

// The 16-bit lane constants of an in-place scale of FP16/BF16 words by @p factor = 2^k (normal
// and positive): a word whose exponent field e satisfies 1 <= e <= max and 1 <= e + k <= max (its
// `(word & exponent_mask) - range_start` below `range_size`, unsigned) is scaled exactly by adding
// `delta` to it; other nonzero words need the FP32 path. Empty for any other factor, or when no
// normal input stays normal. Ops keeps each instruction set's instantiation its own.
struct WordScale {
  std::uint16_t exponent_mask, range_start, range_size, delta;
};

template <class Ops, DataType D>
std::optional<WordScale> PowerOfTwoWordScale(float factor) {
  std::uint32_t bits = 0;
  __builtin_memcpy(&bits, &factor, sizeof bits);
  const int biased = static_cast<int>((bits >> 23) & 0xffu);
  if ((bits & 0x807fffffu) != 0 || biased == 0 || biased == 0xff) {
    return std::nullopt;  // negative, zero, subnormal, Inf/NaN or not a power of two
  }
  const int k = biased - 127;
  constexpr bool kHalf = D == DataType::Float16;
  constexpr int kShift = kHalf ? 10 : 7;
  constexpr int kMaxNormal = kHalf ? 30 : 254;  // largest biased exponent of a finite number
  const int lo = k < 0 ? 1 - k : 1;
  const int hi = k > 0 ? kMaxNormal - k : kMaxNormal;
  if (lo > hi) {
    return std::nullopt;  // everything would take the FP32 path
  }
  return WordScale{static_cast<std::uint16_t>(kHalf ? 0x7c00 : 0x7f80), static_cast<std::uint16_t>(lo << kShift),
                   static_cast<std::uint16_t>((hi - lo + 1) << kShift), static_cast<std::uint16_t>(k * (1 << kShift))};
}

// Elements before `p` reaches the size of one full vector of T (kWidth elements, which
// is what one full store writes), at most `count` and always below kWidth, so one partial
// step covers it. Tensors come from malloc (16-byte aligned) and views start anywhere;
// without this head every full 64-byte store would straddle two cache lines.
template <class Ops, typename T>
std::size_t AlignHead(const T* p, std::size_t count) {
  constexpr std::size_t kBytes = Ops::kWidth * sizeof(T);
  const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(p) % kBytes;
  const std::size_t head = misalignment == 0 ? 0 : (kBytes - misalignment) / sizeof(T);
  return head < count ? head : count;
}

// Software prefetch, kPrefetchDistance bytes ahead of the loads, in the from_memory kernels only
// (Ops::kPrefetch). The hardware prefetcher stops at each 4 KiB page and needs a few misses to
// lock onto a new stream; asking one page ahead crosses that boundary for it (10-21% faster on
// every layout on a Xeon host). For data already in the caches it only costs: the same kernels
// without it ran 1M-element lists 12% faster (geometric mean, 29 of 32 cases, an EPYC host). On
// AMD EPYC it costs from memory too (up to 39% slower, never measurably faster),
// so there calls from memory run these loops without it (KernelTable::from_memory_no_prefetch).
// It deliberately runs past the end of the piece: a prefetch never faults, and tensors
// allocated one after another lie one after another on the heap, so the lines past one
// tensor's end are usually the next tensor's head. Stopping at the end was measured 1.1-1.4x
// slower on separately allocated small tensors.
// Templated on Ops like every loop here, so each instruction-set file gets its own copy.
constexpr std::size_t kPrefetchDistance = 4096;

// kLines cache lines, for loops that read kLines full lines per iteration.
template <class Ops, std::size_t kLines, typename T>
void PrefetchLines(const T* p) {
  if constexpr (Ops::kPrefetch) {
    for (std::size_t line = 0; line < kLines; ++line) {
      __builtin_prefetch(reinterpret_cast<const char*>(p) + kPrefetchDistance + 64 * line);
    }
  }
}

// The lines a two-register iteration over T reads: two for FP32, one for 16-bit types.
template <class Ops, typename T>
void PrefetchAhead(const T* p) {
  PrefetchLines<Ops, sizeof(T) == 4 ? 2 : 1>(p);
}

// out[i] = round(in[i] * f) for i < count with ordinary stores: a partial vector up to the first
// vector-aligned element of out, aligned full vectors, a partial tail. Returns the flag folded
// over what it wrote. The flag is a value, not a reference: through a reference the compiler must
// assume each 16-bit store may change it, and kept it in memory, a load and a store per vector on
// the loop's critical path (casts that stay in cache ran at a third of copy speed).
// peak raised lane-wise to |v| where v is finite: what an amax folds in (Inf and NaN left out,
// so an overflowing pass still reports the amax of its finite values). A compare and a blend,
// not xsimd::max: with GCC 12 its AVX-512 form reads an "undefined" register that
// -Wuninitialized flags.
template <class Ops>
typename Ops::Batch RaiseAmax(const typename Ops::Batch& peak, const typename Ops::Batch& v) {
  using Batch = typename Ops::Batch;
  using Bits = xsimd::batch<std::int32_t, typename Batch::arch_type>;
  // On the bits: the magnitudes of non-negative floats order like their bit patterns, and every
  // Inf or NaN lies at 0x7F800000 or above, so the finite test stays off the loop-carried chain,
  // which is one integer max (a float compare and blend on the chain made the FP16 -> FP32 cast
  // with amax about 9% slower than without).
  const Bits magnitude = xsimd::bitwise_cast<Bits>(v) & Bits(0x7FFFFFFF);
  const Bits finite = xsimd::select(magnitude < Bits(0x7F800000), magnitude, Bits(0));
  const Bits current = xsimd::bitwise_cast<Bits>(peak);
  return xsimd::bitwise_cast<Batch>(xsimd::select(finite > current, finite, current));
}

// The lane-wise maximum of two amax batches (no NaN lanes).
template <class Ops>
typename Ops::Batch MaxOf(const typename Ops::Batch& a, const typename Ops::Batch& b) {
  return xsimd::select(a > b, a, b);
}

// The largest lane of a batch of non-negative floats.
template <class Batch>
float LaneMax(const Batch& v) {
  alignas(64) std::array<float, Batch::size> lanes{};
  v.store_aligned(lanes.data());
  float peak = 0.0f;
  for (const float lane : lanes) {
    peak = lane > peak ? lane : peak;
  }
  return peak;
}

// out[i] = round(in[i] * f) for i < count with ordinary stores: a partial vector up to the first
// vector-aligned element of out, aligned full vectors, a partial tail. Returns the flag folded
// over what it wrote. The flag is a value, not a reference: through a reference the compiler must
// assume each 16-bit store may change it, and kept it in memory, a load and a store per vector on
// the loop's critical path (casts that stay in cache ran at a third of copy speed).
// kAmax: also folds every product into the amax *peak (RaiseAmax) (kept in a local for the same reason);
// without it the loop is the plain cast, not a branch.
template <class Ops, DataType S, DataType T, bool kAmax = false>
typename Ops::Flag CastOrdinary(const Element<S>* in, Element<T>* out, std::size_t count, const typename Ops::Batch& f,
                                typename Ops::Flag flag, typename Ops::Batch* peak = nullptr) {
  using Batch = typename Ops::Batch;
  Batch amax(0.0f);
  if constexpr (kAmax) {
    amax = *peak;
  }
  // A default capture: without kAmax the lambda does not use amax.
  const auto product = [&](const Batch& x) {
    const Batch v = x * f;
    if constexpr (kAmax) {
      amax = RaiseAmax<Ops>(amax, v);
    }
    return v;
  };
  std::size_t i = AlignHead<Ops>(out, count);  // align the stores; loads may straddle
  if (i > 0) {
    Ops::template StorePartial<T>(out, i, product(Ops::template LoadPartial<S>(in, i)), flag);
  }
  for (; i + 2 * Ops::kWidth <= count; i += 2 * Ops::kWidth) {
    PrefetchAhead<Ops>(in + i);
    const Batch a = product(Ops::template Load<S>(in + i));
    const Batch b = product(Ops::template Load<S>(in + i + Ops::kWidth));
    Ops::template Store<T>(out + i, a, flag);
    Ops::template Store<T>(out + i + Ops::kWidth, b, flag);
  }
  for (; i + Ops::kWidth <= count; i += Ops::kWidth) {
    Ops::template Store<T>(out + i, product(Ops::template Load<S>(in + i)), flag);
  }
  if (i < count) {
    const std::size_t n = count - i;
    Ops::template StorePartial<T>(out + i, n, product(Ops::template LoadPartial<S>(in + i, n)), flag);
  }
  if constexpr (kAmax) {
    *peak = amax;
  }
  return flag;
}

template <class Ops, DataType D>
bool Unscale(void* data, std::size_t count, float factor) {
  using Batch = typename Ops::Batch;
  auto* p = static_cast<Element<D>*>(data);
  if constexpr (D != DataType::Float32 && Ops::kWordKernels) {
    // Loss scales are powers of two: most calls write the 16-bit words directly.
    bool found = false;
    if (Ops::template ScaleWords<D>(p, count, factor, found)) {
      return found;
    }
  }
  return Ops::template AnyNonFinite<D>(CastOrdinary<Ops, D, D>(p, p, count, Batch(factor), Ops::template NoFlag<D>()));
}

template <class Ops, DataType D>
void Scale(void* data, std::size_t count, float factor) {
  // The same loop with the flag left unused: the compiler drops its computation.
  (void)Unscale<Ops, D>(data, count, factor);
}

template <class Ops, DataType D>
bool NonFinite(const void* data, std::size_t count) {
  const auto* p = static_cast<const Element<D>*>(data);
  constexpr std::size_t kStep = Ops::template kCheckElements<D>;
  auto flag = Ops::template NoCheckFlag<D>();
  std::size_t i = AlignHead<Ops>(p, count);
  if (i > 0) {
    Ops::template CheckPartial<D>(p, i, flag);
  }
  // Four flags, one per block of an iteration. Folded into one flag, every block waits for the
  // previous block's fold, and from memory the check of a flat 64M-element FP32 list ran 1.3x
  // slower than its sum of squares over the same bytes.
  auto flag1 = Ops::template NoCheckFlag<D>();
  auto flag2 = Ops::template NoCheckFlag<D>();
  auto flag3 = Ops::template NoCheckFlag<D>();
  for (; i + 4 * kStep <= count; i += 4 * kStep) {
    PrefetchLines<Ops, 4>(p + i);
    Ops::template CheckBlock<D>(p + i, flag);
    Ops::template CheckBlock<D>(p + i + kStep, flag1);
    Ops::template CheckBlock<D>(p + i + 2 * kStep, flag2);
    Ops::template CheckBlock<D>(p + i + 3 * kStep, flag3);
  }
  flag = Ops::template MergeChecks<D>(Ops::template MergeChecks<D>(flag, flag1),
                                      Ops::template MergeChecks<D>(flag2, flag3));
  for (; i + kStep <= count; i += kStep) {
    Ops::template CheckBlock<D>(p + i, flag);
  }
  if (i < count) {
    Ops::template CheckPartial<D>(p + i, count - i, flag);
  }
  return Ops::template AnyNonFiniteChecked<D>(flag);
}

// Unscale() that also folds the amax of the products into *amax. The 16-bit word kernels write
// the words without the FP32 products, so this always takes the converting loop.
template <class Ops, DataType D>
bool UnscaleAmax(void* data, std::size_t count, float factor, float* amax) {
  using Batch = typename Ops::Batch;
  auto* p = static_cast<Element<D>*>(data);
  Batch peak(0.0f);
  const auto flag = CastOrdinary<Ops, D, D, true>(p, p, count, Batch(factor), Ops::template NoFlag<D>(), &peak);
  const float piece = LaneMax(peak);
  *amax = piece > *amax ? piece : *amax;
  return Ops::template AnyNonFinite<D>(flag);
}

// NonFinite() that also folds the amax of the values into *amax. Every value is widened to FP32
// (the amax needs it), so the check rides on the same vectors: `bad += v * 0` stays 0 while every
// value is finite and becomes NaN at the first Inf or NaN.
template <class Ops, DataType D>
bool NonFiniteAmax(const void* data, std::size_t count, float* amax) {
  using Batch = typename Ops::Batch;
  const auto* p = static_cast<const Element<D>*>(data);
  constexpr std::size_t kW = Ops::kWidth;
  const Batch zero(0.0f);
  Batch peak0(0.0f), peak1(0.0f), bad0(0.0f), bad1(0.0f);
  const auto fold = [&zero](const Batch& v, Batch& peak, Batch& bad) {
    peak = RaiseAmax<Ops>(peak, v);
    bad = xsimd::fma(v, zero, bad);
  };
  std::size_t i = AlignHead<Ops>(p, count);
  if (i > 0) {
    fold(Ops::template LoadPartial<D>(p, i), peak0, bad0);
  }
  for (; i + 2 * kW <= count; i += 2 * kW) {
    PrefetchAhead<Ops>(p + i);
    fold(Ops::template Load<D>(p + i), peak0, bad0);
    fold(Ops::template Load<D>(p + i + kW), peak1, bad1);
  }
  for (; i + kW <= count; i += kW) {
    fold(Ops::template Load<D>(p + i), peak0, bad0);
  }
  if (i < count) {
    fold(Ops::template LoadPartial<D>(p + i, count - i), peak1, bad1);
  }
  const float piece = LaneMax(MaxOf<Ops>(peak0, peak1));
  *amax = piece > *amax ? piece : *amax;
  const Batch bad = bad0 + bad1;
  // Not `bad != bad`: xsimd compares with the ordered not-equal, false for NaN.
  return xsimd::any(!(bad == bad));
}

// The sum of the lanes of an FP64 batch, lane by lane in order. Not xsimd::hadd: with GCC 12 its
// AVX-512 FP64 form reads an "undefined" register that -Wuninitialized flags.
template <class Wide>
double LaneSum(const Wide& v) {
  alignas(64) std::array<double, Wide::size> lanes{};
  v.store_aligned(lanes.data());
  double sum = 0.0;
  for (const double lane : lanes) {
    sum += lane;
  }
  return sum;
}

// The FP32 sum of squares of calls from memory, accumulated in FP64: one 64-byte line per
// iteration, each FP32 vector widened exactly into two FP64 halves, one chain of FMAs per half.
// From memory the arithmetic is free, and this loop streamed faster than four FP32 accumulators:
// over one 64 MiB buffer, 2 threads, against a plain FP32 sum loop, 1.02-1.09 where the four
// accumulators ran at 0.95-0.98 (an EPYC host). In cache it runs
// at 0.6-0.8 of that loop, so calls that run from cache take the FP32 blocks below.
template <class Ops>
float SumSquaresWide(const float* p, std::size_t count) {
  using Wide = typename Ops::WideBatch;
  constexpr std::size_t kW = Ops::kWidth;
  constexpr std::size_t kLine = 64 / sizeof(float);
  constexpr std::size_t kVectors = kLine / kW;  // FP32 vectors in one line
  static_assert(kLine % kW == 0, "a line holds whole vectors");
  std::array<Wide, 2 * kVectors> acc;
  acc.fill(Wide(0.0));
  const auto add = [&acc](std::size_t k, const std::pair<Wide, Wide>& halves) {
    acc[2 * k] = xsimd::fma(halves.first, halves.first, acc[2 * k]);
    acc[2 * k + 1] = xsimd::fma(halves.second, halves.second, acc[2 * k + 1]);
  };
  std::size_t i = AlignHead<Ops>(p, count);
  if (i > 0) {
    add(0, Ops::Widen(Ops::template LoadPartial<DataType::Float32>(p, i)));
  }
  for (; i + kLine <= count; i += kLine) {
    PrefetchLines<Ops, 1>(p + i);
    for (std::size_t k = 0; k < kVectors; ++k) {
      add(k, Ops::LoadWide(p + i + k * kW));
    }
  }
  for (; i + kW <= count; i += kW) {
    add(0, Ops::LoadWide(p + i));
  }
  if (i < count) {
    add(0, Ops::Widen(Ops::template LoadPartial<DataType::Float32>(p + i, count - i)));
  }
  Wide total = acc[0];
  for (std::size_t k = 1; k < acc.size(); ++k) {
    total += acc[k];
  }
  return static_cast<float>(LaneSum(total));
}

// kFromMemory: the set for calls from memory (FP32 takes SumSquaresWide above).
// Four FP32 accumulators hide the FMA latency. For FP32 from cache, in blocks of 16 vectors whose
// sums are widened into FP64 sums, so FP32 rounding never builds up past a block: with one FP32
// sum per lane over a whole 32,768-element chunk, a list of 0.1f was off by 5e-6
// (MultiTensorKernelTests, Fp32SumOfSquaresOfConstantValues); in cache the blocks took 1.00-1.03
// of the unblocked loop's time. The 16-bit types keep one run per piece: their loop is bound by
// the conversions, and the blocks' widening made FP16 in cache 4-22% slower (blocks of 128 to 16
// vectors).
template <class Ops, DataType D, bool kFromMemory>
float SumSquares(const void* data, std::size_t count) {
  using Batch = typename Ops::Batch;
  using Wide = typename Ops::WideBatch;
  const auto* p = static_cast<const Element<D>*>(data);
  if constexpr (D == DataType::BFloat16 && Ops::kBf16WordSums) {
    return Ops::SumSquaresBf16Words(p, count);
  }
  if constexpr (D == DataType::Float32 && kFromMemory) {
    return SumSquaresWide<Ops>(p, count);
  }
  constexpr std::size_t kW = Ops::kWidth;
  constexpr std::size_t kBlock = 16 * kW;
  Wide low(0.0), high(0.0);
  const auto fold = [&low, &high](const Batch& sum) {
    const auto halves = Ops::Widen(sum);
    low += halves.first;
    high += halves.second;
  };
  // Four vectors at q into four accumulators.
  const auto add4 = [](const Element<D>* q, Batch& acc0, Batch& acc1, Batch& acc2, Batch& acc3) {
    PrefetchLines<Ops, 4 * kW * sizeof(Element<D>) / 64>(q);
    const Batch a = Ops::template Load<D>(q);
    const Batch b = Ops::template Load<D>(q + kW);
    const Batch c = Ops::template Load<D>(q + 2 * kW);
    const Batch d = Ops::template Load<D>(q + 3 * kW);
    acc0 = xsimd::fma(a, a, acc0);
    acc1 = xsimd::fma(b, b, acc1);
    acc2 = xsimd::fma(c, c, acc2);
    acc3 = xsimd::fma(d, d, acc3);
  };
  std::size_t i = AlignHead<Ops>(p, count);
  if (i > 0) {
    const Batch a = Ops::template LoadPartial<D>(p, i);
    fold(a * a);
  }
  if constexpr (D == DataType::Float32) {
    // Whole blocks, a fixed trip count the compiler unrolls.
    for (; i + kBlock <= count; i += kBlock) {
      Batch acc0(0.0f), acc1(0.0f), acc2(0.0f), acc3(0.0f);
      for (std::size_t j = 0; j < kBlock; j += 4 * kW) {
        add4(p + i + j, acc0, acc1, acc2, acc3);
      }
      fold((acc0 + acc1) + (acc2 + acc3));
    }
  }
  Batch acc0(0.0f), acc1(0.0f), acc2(0.0f), acc3(0.0f);
  for (; i + 4 * kW <= count; i += 4 * kW) {
    add4(p + i, acc0, acc1, acc2, acc3);
  }
  for (; i + kW <= count; i += kW) {
    const Batch a = Ops::template Load<D>(p + i);
    acc0 = xsimd::fma(a, a, acc0);
  }
  if (i < count) {
    const Batch a = Ops::template LoadPartial<D>(p + i, count - i);
    acc1 = xsimd::fma(a, a, acc1);
  }
  fold((acc0 + acc1) + (acc2 + acc3));
  return static_cast<float>(LaneSum(low + high));
}

// kStream: the stores of whole 64-byte lines of out bypass the caches (non-temporal), for
// outputs too big to be read back from cache; the caller fences them before anyone reads the
// output. Only whole lines: a 16-bit vector is half a line, and a line written partly by
// non-temporal stores and partly by ordinary ones (this piece's head or tail, or the piece next to
// it in a packed buffer) leaves a write-combining buffer to be flushed half full, a partial
// write to memory. Streaming whole lines only made the narrowing casts of separately allocated
// small tensors 11-31% faster.
// kAmax: also folds the amax of the products into *peak (the plain cast without it).
template <class Ops, DataType S, DataType T, bool kStream, bool kAmax>
typename Ops::Flag CastBody(const void* src, void* dst, std::size_t count, float factor, typename Ops::Batch* peak) {
  using Batch = typename Ops::Batch;
  const auto* in = static_cast<const Element<S>*>(src);
  auto* out = static_cast<Element<T>*>(dst);
  const Batch f(factor);
  auto flag = Ops::template NoFlag<T>();
  if constexpr (!kStream) {
    flag = CastOrdinary<Ops, S, T, kAmax>(in, out, count, f, flag, peak);
  } else {
    constexpr std::size_t kLine = 64 / sizeof(Element<T>);  // elements in one line of out
    static_assert(kLine % Ops::kWidth == 0, "a line holds whole vectors");
    // Each step writes whole lines of out and reads whole lines of in (two lines of out for a
    // widening cast, two of in for a narrowing one), so every source line is prefetched once.
    constexpr std::size_t kSourceLine = 64 / sizeof(Element<S>);  // elements in one line of in
    constexpr std::size_t kStep = kLine > kSourceLine ? kLine : kSourceLine;
    const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(out) % 64;
    std::size_t head = misalignment == 0 ? 0 : (64 - misalignment) / sizeof(Element<T>);
    if (misalignment % sizeof(Element<T>) != 0 || head > count) {
      head = count;  // no whole line to stream
    }
    const std::size_t lines_end = head + (count - head) / kStep * kStep;
    flag = CastOrdinary<Ops, S, T, kAmax>(in, out, head, f, flag, peak);
    Batch amax(0.0f);
    for (std::size_t i = head; i < lines_end; i += kStep) {
      PrefetchLines<Ops, kStep * sizeof(Element<S>) / 64>(in + i);
      for (std::size_t v = 0; v < kStep; v += Ops::kWidth) {
        const Batch product = Ops::template Load<S>(in + i + v) * f;
        if constexpr (kAmax) {
          amax = RaiseAmax<Ops>(amax, product);
        }
        Ops::template Store<T, true>(out + i + v, product, flag);
      }
    }
    if constexpr (kAmax) {
      *peak = MaxOf<Ops>(*peak, amax);
    }
    flag = CastOrdinary<Ops, S, T, kAmax>(in + lines_end, out + lines_end, count - lines_end, f, flag, peak);
    // No fence here. The caller fences once per chunk (MultiTensorKernels.cpp, CastKernel): an sfence per
    // call cost a full write-combining drain per small tensor.
  }
  return flag;
}

// kStream: the stores of whole 64-byte lines of out bypass the caches (non-temporal), for
// outputs too big to be read back from cache; the caller fences them before anyone reads the
// output. Only whole lines: a 16-bit vector is half a line, and a line written partly by
// non-temporal stores and partly by ordinary ones (this piece's head or tail, or the piece next to
// it in a packed buffer) leaves a write-combining buffer to be flushed half full, a partial
// write to memory. Streaming whole lines only made the narrowing casts of separately allocated
// small tensors 11-31% faster.
template <class Ops, DataType S, DataType T, bool kStream = false>
bool Cast(const void* src, void* dst, std::size_t count, float factor) {
  return Ops::template AnyNonFinite<T>(CastBody<Ops, S, T, kStream, false>(src, dst, count, factor, nullptr));
}

// Cast() that also folds the amax of the products into *amax.
template <class Ops, DataType S, DataType T, bool kStream = false>
bool CastAmax(const void* src, void* dst, std::size_t count, float factor, float* amax) {
  typename Ops::Batch peak(0.0f);
  const auto flag = CastBody<Ops, S, T, kStream, true>(src, dst, count, factor, &peak);
  const float piece = LaneMax(peak);
  *amax = piece > *amax ? piece : *amax;
  return Ops::template AnyNonFinite<T>(flag);
}

/// One KernelSet from the loops above for one instruction set: Ops::kPrefetch says whether the
/// loops prefetch in software; kFromMemory, whether the set is for calls from memory (the casts
/// stream their stores, the FP32 sum of squares accumulates in FP64).
template <class Ops, class Set, bool kFromMemory>
constexpr Set MakeSet() {
  constexpr DataType kF32 = DataType::Float32;
  constexpr DataType kF16 = DataType::Float16;
  constexpr DataType kBF16 = DataType::BFloat16;
  return Set{
      {Unscale<Ops, kF32>, Unscale<Ops, kF16>, Unscale<Ops, kBF16>},
      {NonFinite<Ops, kF32>, NonFinite<Ops, kF16>, NonFinite<Ops, kBF16>},
      {SumSquares<Ops, kF32, kFromMemory>, SumSquares<Ops, kF16, kFromMemory>, SumSquares<Ops, kBF16, kFromMemory>},
      {Scale<Ops, kF32>, Scale<Ops, kF16>, Scale<Ops, kBF16>},
      {{Cast<Ops, kF32, kF32, kFromMemory>, Cast<Ops, kF32, kF16, kFromMemory>, Cast<Ops, kF32, kBF16, kFromMemory>},
       {Cast<Ops, kF16, kF32, kFromMemory>, Cast<Ops, kF16, kF16, kFromMemory>, Cast<Ops, kF16, kBF16, kFromMemory>},
       {Cast<Ops, kBF16, kF32, kFromMemory>, Cast<Ops, kBF16, kF16, kFromMemory>,
        Cast<Ops, kBF16, kBF16, kFromMemory>}},
      {UnscaleAmax<Ops, kF32>, UnscaleAmax<Ops, kF16>, UnscaleAmax<Ops, kBF16>},
      {NonFiniteAmax<Ops, kF32>, NonFiniteAmax<Ops, kF16>, NonFiniteAmax<Ops, kBF16>},
      {{CastAmax<Ops, kF32, kF32, kFromMemory>, CastAmax<Ops, kF32, kF16, kFromMemory>,
        CastAmax<Ops, kF32, kBF16, kFromMemory>},
       {CastAmax<Ops, kF16, kF32, kFromMemory>, CastAmax<Ops, kF16, kF16, kFromMemory>,
        CastAmax<Ops, kF16, kBF16, kFromMemory>},
       {CastAmax<Ops, kBF16, kF32, kFromMemory>, CastAmax<Ops, kBF16, kF16, kFromMemory>,
        CastAmax<Ops, kBF16, kBF16, kFromMemory>}},
  };
}

/// Fills the KernelTable of the instruction set tagged Arch (InstructionSets.hpp) from the loops
/// above on its operations: OpsOf<Arch, false> without software prefetch and OpsOf<Arch, true>
/// with it. Both sets for memory stream the casts' stores; they differ only in the prefetch.
template <class Arch, template <class, bool> class OpsOf, class Table>
constexpr Table MakeTable() {
  using Cached = OpsOf<Arch, false>;
  using Memory = OpsOf<Arch, true>;
  static_assert(!Cached::kPrefetch && Memory::kPrefetch);
  using Set = decltype(Table::cached);
  return Table{Arch::kName, MakeSet<Cached, Set, false>(), MakeSet<Memory, Set, true>(), MakeSet<Cached, Set, true>(),
               true};
}

}  // namespace mlframework::backends::cpu::simd
