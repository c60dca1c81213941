// Bulk conversions of the dispatched kernel path against the scalar functions
// of core/FloatBits.hpp, bit for bit: every FP16 and every BF16 bit pattern,
// and about 3.7 million FP32 patterns that cover every exponent, every FP16
// mantissa prefix and the rounding ties of both 16-bit formats. The 16-bit
// tensors are also cut into views of odd lengths so every vector tail runs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/HostConversion.hpp>

#include "core/KernelReference.hpp"

using namespace mlframework;
using namespace kernel_test;

namespace {

// Views of `base` with lengths 1, 2, 3, ... 40, 1, 2, ... (every tail length of every
// vector width), covering all of it.
std::vector<TensorPtr> OddViews(const TensorPtr& base) {
  std::vector<TensorPtr> views;
  std::size_t offset = 0;
  std::size_t length = 1;
  while (offset < base->Size()) {
    const std::size_t n = std::min(length, base->Size() - offset);
    views.push_back(backends::cpu::View(base, offset, {n}));
    offset += n;
    length = length % 40 + 1;
  }
  return views;
}

void CheckCastAllTargets(const TensorPtr& source, float factor, bool with_views) {
  const std::vector<TensorPtr> src_whole = {source};
  for (const DataType target : kAllTypes) {
    const std::string what = std::string(ToString(source->GetDataType())) + " -> " + std::string(ToString(target)) +
                             " isa=" + std::string(backends::cpu::InstructionSet());
    BOOST_TEST_CONTEXT(what) {
      auto dst = backends::cpu::Empty(source->GetShape(), target);
      const std::vector<TensorPtr> dst_whole = {dst};
      auto expected = Snapshot(dst_whole);
      const bool ref_found = RefCast(src_whole, dst_whole, expected, factor);
      BOOST_TEST(CastInto(src_whole, dst_whole, factor) == ref_found);
      RequireSameBits(dst_whole, expected, what);
      if (with_views) {
        // The same through views of every odd length.
        SetBytes(dst, Bytes(ByteSize(dst), 0));
        BOOST_TEST(CastInto(OddViews(source), OddViews(dst), factor) == ref_found);
        RequireSameBits(dst_whole, expected, what + " (odd views)");
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(KernelConversions)

BOOST_AUTO_TEST_CASE(EverySixteenBitPatternWidensAndNarrowsLikeTheScalarCode) {
  for (const DataType dtype : {DataType::Float16, DataType::BFloat16}) {
    const auto all = MakeTensor(dtype, 65536, [](std::size_t i) { return static_cast<std::uint32_t>(i); });
    CheckCastAllTargets(all, 1.0f, true);
    CheckCastAllTargets(all, 0.5f, true);
    CheckCastAllTargets(all, 1024.0f, true);
  }
}

BOOST_AUTO_TEST_CASE(Fp32PatternsRoundLikeTheScalarCode) {
  // (high << 13) | low for all 2^19 high parts: every sign, exponent and FP16 mantissa,
  // with low parts at the FP16 ties; bits 13..15 of the high part make the BF16 ties.
  const std::uint32_t lows[] = {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu};
  Rng rng(11);
  const std::size_t per_high = std::size(lows) + 1;
  const auto patterns = MakeTensor(DataType::Float32, (std::size_t{1} << 19) * per_high, [&](std::size_t i) {
    const auto high = static_cast<std::uint32_t>(i / per_high);
    const std::size_t k = i % per_high;
    const std::uint32_t low = k < std::size(lows) ? lows[k] : (rng.Next32() & 0x1fffu);
    return (high << 13) | low;
  });
  CheckCastAllTargets(patterns, 1.0f, false);
  CheckCastAllTargets(patterns, 3.0f, false);
}

BOOST_AUTO_TEST_CASE(LargeCastsWithNonTemporalStoresAreExact) {
  // Destinations of 16 MiB and more are written with non-temporal stores: check those
  // loops too, whole and through views of assorted odd lengths (every misalignment).
  constexpr std::size_t kCount = 9u << 20;
  Rng rng(12);
  const auto bits = MakeTensor(DataType::Float32, kCount, [&](std::size_t i) {
    return i % 2 == 0 ? RandomFiniteBits(DataType::Float32, rng) : RandomValueBits(DataType::Float32, rng);
  });
  const std::size_t lengths[] = {1, 3, 17, 65537, 1000003, 31};
  for (const DataType target : {DataType::Float16, DataType::BFloat16, DataType::Float32}) {
    BOOST_TEST_CONTEXT("Float32 -> " << ToString(target) << " isa=" << backends::cpu::InstructionSet()) {
      auto dst = backends::cpu::Empty({kCount}, target);
      std::vector<TensorPtr> src_views;
      std::vector<TensorPtr> dst_views;
      for (std::size_t offset = 0, k = 0; offset < kCount; ++k) {
        const std::size_t n = std::min(lengths[k % std::size(lengths)], kCount - offset);
        src_views.push_back(backends::cpu::View(bits, offset, {n}));
        dst_views.push_back(backends::cpu::View(dst, offset, {n}));
        offset += n;
      }
      const std::vector<TensorPtr> src_whole = {bits};
      const std::vector<TensorPtr> dst_whole = {dst};
      auto expected = Snapshot(dst_whole);
      const bool ref_found = RefCast(src_whole, dst_whole, expected, 0.25f);
      BOOST_TEST(CastInto(src_whole, dst_whole, 0.25f) == ref_found);
      RequireSameBits(dst_whole, expected, "whole");
      SetBytes(dst, Bytes(ByteSize(dst), 0));
      BOOST_TEST(CastInto(src_views, dst_views, 0.25f) == ref_found);
      RequireSameBits(dst_whole, expected, "views");
    }
  }
}

BOOST_AUTO_TEST_CASE(HostConversionOfRawBuffersMatchesTheScalarCode) {
  // ConvertHostElements (core's raw-buffer conversion, the CPU backend's dispatched casts):
  // every 16-bit pattern widened and FP32 patterns narrowed, bit for bit, in blocks of every
  // odd length at every offset, as a collective converts its buffers.
  Rng rng(13);
  const auto fp32 = MakeTensor(DataType::Float32, std::size_t{1} << 18, [&](std::size_t i) {
    return i % 2 == 0 ? RandomFiniteBits(DataType::Float32, rng) : RandomValueBits(DataType::Float32, rng);
  });
  for (const DataType dtype : {DataType::Float16, DataType::BFloat16}) {
    const auto all = MakeTensor(dtype, 65536, [](std::size_t i) { return static_cast<std::uint32_t>(i); });
    for (const auto& [source, target] : {std::pair{all, DataType::Float32}, std::pair{fp32, dtype}}) {
      const std::string what = std::string(ToString(source->GetDataType())) + " -> " + std::string(ToString(target)) +
                               " isa=" + std::string(backends::cpu::InstructionSet());
      BOOST_TEST_CONTEXT(what) {
        const auto dst = backends::cpu::Empty(source->GetShape(), target);
        const std::vector<TensorPtr> dst_whole = {dst};
        auto expected = Snapshot(dst_whole);
        static_cast<void>(RefCast({source}, dst_whole, expected, 1.0f));
        const auto* in = static_cast<const std::byte*>(backends::cpu::Data(*source));
        auto* out = static_cast<std::byte*>(backends::cpu::MutableData(*dst));
        for (std::size_t offset = 0, length = 1; offset < source->Size(); length = length % 40 + 1) {
          const std::size_t n = std::min(length, source->Size() - offset);
          ConvertHostElements(in + offset * ElementSize(source->GetDataType()), source->GetDataType(),
                              out + offset * ElementSize(target), target, n);
          offset += n;
        }
        RequireSameBits(dst_whole, expected, what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(HostConversionRejectsBadArguments) {
  std::vector<float> wide(4, 1.0f);
  std::vector<std::uint16_t> narrow(4, 0);
  const auto bad = static_cast<DataType>(7);
  BOOST_CHECK_THROW(ConvertHostElements(wide.data(), bad, narrow.data(), DataType::Float16, 4), ArgumentError);
  BOOST_CHECK_THROW(ConvertHostElements(wide.data(), DataType::Float32, narrow.data(), bad, 4), ArgumentError);
  BOOST_CHECK_THROW(ConvertHostElements(nullptr, DataType::Float32, narrow.data(), DataType::Float16, 4),
                    ArgumentNullError);
  BOOST_CHECK_THROW(ConvertHostElements(wide.data(), DataType::Float32, nullptr, DataType::Float16, 4),
                    ArgumentNullError);
  BOOST_TEST(narrow == std::vector<std::uint16_t>(4, 0));                          // nothing written on error
  ConvertHostElements(nullptr, DataType::Float32, nullptr, DataType::Float16, 0);  // nothing to convert
  ConvertHostElements(wide.data(), DataType::Float32, narrow.data(), DataType::Float16, 4);
  BOOST_TEST(narrow == std::vector<std::uint16_t>(4, 0x3c00u));  // FP16 1.0
}

BOOST_AUTO_TEST_CASE(UnscaleOfEverySixteenBitPattern) {
  for (const DataType dtype : {DataType::Float16, DataType::BFloat16}) {
    // Powers of two take the in-place 16-bit paths (exponent add; VMULPH on avx512_fp16),
    // including ones that push results into subnormals, to Inf, or out of range of FP16
    // entirely; 0.75 and 3 are FP16 numbers that are not powers of two (VMULPH path);
    // 40000.5, -2 and the smallest normal FP32 take the FP32 path.
    for (const float factor :
         {1.0f,    1.0f / 65536.0f, 0.75f,   40000.0f, 40000.5f,  3.0f,     2.0f,     0.5f,      0x1p-24f, 0x1p-14f,
          0x1p15f, 0x1p16f,         0x1p24f, 0x1p-30f, 0x1p-100f, 0x1p100f, 0x1p127f, 0x1p-126f, -2.0f,    0.0f}) {
      BOOST_TEST_CONTEXT(ToString(dtype) << " factor " << factor) {
        const auto all = MakeTensor(dtype, 65536, [](std::size_t i) { return static_cast<std::uint32_t>(i); });
        const auto views = OddViews(all);
        const std::vector<TensorPtr> whole = {all};
        auto expected = Snapshot(whole);
        const bool ref_found = RefUnscale(whole, expected, factor);
        BOOST_TEST(ref_found);  // the list holds Inf and NaN patterns
        BOOST_TEST(UnscaleAndCheck(views, factor) == ref_found);
        RequireSameBits(whole, expected, "unscale " + std::string(backends::cpu::InstructionSet()));
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
