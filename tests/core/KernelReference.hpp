#pragma once
// Test helpers for the CPU multi-tensor kernels: a plain scalar reference
// (one element at a time through core/FloatBits.hpp, the functions the CUDA
// backend shares), random tensor lists, snapshots and bit comparisons.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <omp.h>

#include <boost/test/unit_test.hpp>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/mlframework.hpp>

namespace kernel_test {

using mlframework::DataType;
using mlframework::TensorPtr;

inline constexpr DataType kAllTypes[] = {DataType::Float32, DataType::Float16, DataType::BFloat16};
/// kAllTypes and the FP8 formats (Float8KernelTests.cpp).
inline constexpr DataType kEveryType[] = {DataType::Float32, DataType::Float16, DataType::BFloat16,
                                          DataType::Float8E4M3FN, DataType::Float8E5M2};

/// xorshift64*: fast, deterministic, good enough for test data.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t Next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1Dull;
  }
  std::uint32_t Next32() { return static_cast<std::uint32_t>(Next() >> 32); }
  /// Uniform in [lo, hi].
  std::size_t Between(std::size_t lo, std::size_t hi) { return lo + static_cast<std::size_t>(Next() % (hi - lo + 1)); }
  /// Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

// ---- the scalar reference ----------------------------------------------------------------

inline float RefLoad(DataType dtype, const void* base, std::size_t i) {
  switch (dtype) {
    case DataType::Float16:
      return mlframework::detail::HalfBitsToFloat(static_cast<const std::uint16_t*>(base)[i]);
    case DataType::BFloat16:
      return mlframework::detail::BFloat16BitsToFloat(static_cast<const std::uint16_t*>(base)[i]);
    case DataType::Float8E4M3FN:
      return mlframework::detail::Float8E4M3FNBitsToFloat(static_cast<const std::uint8_t*>(base)[i]);
    case DataType::Float8E5M2:
      return mlframework::detail::Float8E5M2BitsToFloat(static_cast<const std::uint8_t*>(base)[i]);
    case DataType::Float32:
      break;
  }
  return static_cast<const float*>(base)[i];
}

inline void RefStore(DataType dtype, void* base, std::size_t i, float value) {
  switch (dtype) {
    case DataType::Float16:
      static_cast<std::uint16_t*>(base)[i] = mlframework::detail::FloatToHalfBits(value);
      return;
    case DataType::BFloat16:
      static_cast<std::uint16_t*>(base)[i] = mlframework::detail::FloatToBFloat16Bits(value);
      return;
    case DataType::Float8E4M3FN:
      static_cast<std::uint8_t*>(base)[i] = mlframework::detail::FloatToFloat8E4M3FNBits(value);
      return;
    case DataType::Float8E5M2:
      static_cast<std::uint8_t*>(base)[i] = mlframework::detail::FloatToFloat8E5M2Bits(value);
      return;
    case DataType::Float32:
      break;
  }
  static_cast<float*>(base)[i] = value;
}

inline bool RefFinite(DataType dtype, const void* base, std::size_t i) {
  return std::isfinite(RefLoad(dtype, base, i));
}

/// x * factor as the kernels compute it. The factor goes through a volatile so the compiler
/// cannot fold `x * 1.0f` to `x` (which would keep a signaling NaN that the multiply quiets).
inline float RefMultiply(float x, float factor) {
  volatile float opaque = factor;
  return x * opaque;
}

// ---- tensors, snapshots, comparisons ---------------------------------------------------------

using Bytes = std::vector<unsigned char>;

inline std::size_t ByteSize(const TensorPtr& t) { return t->Size() * mlframework::ElementSize(t->GetDataType()); }

inline Bytes BytesOf(const TensorPtr& t) {
  const auto* p = static_cast<const unsigned char*>(mlframework::backends::cpu::Data(*t));
  return {p, p + ByteSize(t)};
}

inline void SetBytes(const TensorPtr& t, const Bytes& bytes) {
  if (!bytes.empty()) {
    std::memcpy(mlframework::backends::cpu::MutableData(*t), bytes.data(), bytes.size());
  }
}

inline std::vector<Bytes> Snapshot(const std::vector<TensorPtr>& list) {
  std::vector<Bytes> snap;
  snap.reserve(list.size());
  for (const auto& t : list) {
    snap.push_back(BytesOf(t));
  }
  return snap;
}

inline void Restore(const std::vector<TensorPtr>& list, const std::vector<Bytes>& snap) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    SetBytes(list[i], snap[i]);
  }
}

/// Bits of element i of a buffer of dtype, widened to 32 bits for messages.
inline std::uint32_t BitsAt(DataType dtype, const unsigned char* base, std::size_t i) {
  if (dtype == DataType::Float32) {
    std::uint32_t bits;
    std::memcpy(&bits, base + 4 * i, 4);
    return bits;
  }
  if (mlframework::IsFloat8(dtype)) {
    return base[i];
  }
  std::uint16_t bits;
  std::memcpy(&bits, base + 2 * i, 2);
  return bits;
}

/// Checks that every tensor holds exactly the expected bytes; reports the first difference.
inline void RequireSameBits(const std::vector<TensorPtr>& list, const std::vector<Bytes>& expected,
                            const std::string& what) {
  for (std::size_t t = 0; t < list.size(); ++t) {
    const Bytes actual = BytesOf(list[t]);
    if (actual == expected[t]) {
      continue;
    }
    const DataType dtype = list[t]->GetDataType();
    const std::size_t size = mlframework::ElementSize(dtype);
    std::size_t i = 0;
    while (i < list[t]->Size() && std::memcmp(actual.data() + i * size, expected[t].data() + i * size, size) == 0) {
      ++i;
    }
    BOOST_ERROR(what << ": tensor " << t << " (" << mlframework::ToString(dtype) << ", " << list[t]->Size()
                     << " elements) element " << i << " has bits 0x" << std::hex << BitsAt(dtype, actual.data(), i)
                     << ", reference 0x" << BitsAt(dtype, expected[t].data(), i) << std::dec);
    return;
  }
}

/// A tensor of @p dtype and @p count elements filled by @p bits (raw element bits).
template <typename BitsFn>
TensorPtr MakeTensor(DataType dtype, std::size_t count, BitsFn&& bits) {
  auto t = mlframework::backends::cpu::Empty({count}, dtype);
  void* data = mlframework::backends::cpu::MutableData(*t);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t b = bits(i);
    if (dtype == DataType::Float32) {
      std::memcpy(static_cast<unsigned char*>(data) + 4 * i, &b, 4);
    } else if (mlframework::IsFloat8(dtype)) {
      static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(b);
    } else {
      const auto h = static_cast<std::uint16_t>(b);
      std::memcpy(static_cast<unsigned char*>(data) + 2 * i, &h, 2);
    }
  }
  return t;
}

/// Random finite element bits of @p dtype: every exponent (subnormals and zeros included).
inline std::uint32_t RandomFiniteBits(DataType dtype, Rng& rng) {
  for (;;) {
    const std::uint32_t r = rng.Next32();
    switch (dtype) {
      case DataType::Float16:
        if (((r >> 16) & 0x7c00u) != 0x7c00u) {
          return r >> 16;
        }
        break;
      case DataType::BFloat16:
        if (((r >> 16) & 0x7f80u) != 0x7f80u) {
          return r >> 16;
        }
        break;
      case DataType::Float8E4M3FN:
        if (((r >> 24) & 0x7fu) != 0x7fu) {
          return r >> 24;
        }
        break;
      case DataType::Float8E5M2:
        if (((r >> 24) & 0x7cu) != 0x7cu) {
          return r >> 24;
        }
        break;
      case DataType::Float32:
        if ((r & 0x7f800000u) != 0x7f800000u) {
          return r;
        }
        break;
    }
  }
}

/// Gradient-like values: normal-ish magnitudes times 2^k, k in [-14, 6], rounded into dtype.
inline std::uint32_t RandomValueBits(DataType dtype, Rng& rng) {
  const double u = rng.Unit() + rng.Unit() + rng.Unit() - 1.5;  // bell-shaped, |u| < 1.5
  const auto k = static_cast<int>(rng.Between(0, 20)) - 14;
  const auto v = static_cast<float>(std::ldexp(u, k));
  unsigned char buffer[4];
  RefStore(dtype, buffer, 0, v);
  return BitsAt(dtype, buffer, 0);
}

/// The sizes of a random list: empty, length-1, odd lengths, chunk-crossing lengths, and a
/// non-empty odd-length last tensor.
inline std::vector<std::size_t> RandomSizes(Rng& rng) {
  // 32769 crosses a chunk boundary (32768 elements); about 80,000 elements in all, so
  // several chunks and both threads get work.
  std::vector<std::size_t> sizes = {0, 1, 7, 0, 33, 1000 + rng.Between(0, 100), 32769};
  for (int i = 0; i < 3; ++i) {
    sizes.push_back(rng.Between(0, 20000));
  }
  sizes.push_back(1);
  sizes.push_back(0);
  sizes.push_back(2 * rng.Between(1, 6000) + 1);
  return sizes;
}

enum class Fill { Bits, Values };

inline std::vector<TensorPtr> RandomList(const std::vector<DataType>& dtypes, const std::vector<std::size_t>& sizes,
                                         Fill fill, Rng& rng) {
  std::vector<TensorPtr> list;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const DataType dtype = dtypes[t % dtypes.size()];
    list.push_back(MakeTensor(dtype, sizes[t], [&](std::size_t) {
      return fill == Fill::Bits ? RandomFiniteBits(dtype, rng) : RandomValueBits(dtype, rng);
    }));
  }
  return list;
}

/// NaN, +Inf and -Inf bits of each dtype (E4M3FN has no infinity: its NaN of that sign).
struct NonFiniteValue {
  const char* name;
  std::uint32_t f32, f16, bf16, e4m3, e5m2;
};
inline constexpr NonFiniteValue kNonFinite[] = {
    {"NaN", 0x7fc00000u, 0x7e00u, 0x7fc0u, 0x7fu, 0x7fu},
    {"+Inf", 0x7f800000u, 0x7c00u, 0x7f80u, 0x7fu, 0x7cu},
    {"-Inf", 0xff800000u, 0xfc00u, 0xff80u, 0xffu, 0xfcu},
};

inline void SetElementBits(const TensorPtr& t, std::size_t i, const NonFiniteValue& value) {
  void* data = mlframework::backends::cpu::MutableData(*t);
  switch (t->GetDataType()) {
    case DataType::Float32:
      std::memcpy(static_cast<unsigned char*>(data) + 4 * i, &value.f32, 4);
      return;
    case DataType::Float16: {
      const auto h = static_cast<std::uint16_t>(value.f16);
      std::memcpy(static_cast<unsigned char*>(data) + 2 * i, &h, 2);
      return;
    }
    case DataType::BFloat16: {
      const auto h = static_cast<std::uint16_t>(value.bf16);
      std::memcpy(static_cast<unsigned char*>(data) + 2 * i, &h, 2);
      return;
    }
    case DataType::Float8E4M3FN:
      static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(value.e4m3);
      return;
    case DataType::Float8E5M2:
      static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(value.e5m2);
      return;
  }
}

// ---- reference operations over a snapshot --------------------------------------------------

/// In place x = round(x * factor) on copies; returns the non-finite flag of the written values.
inline bool RefUnscale(const std::vector<TensorPtr>& list, std::vector<Bytes>& bytes, float factor) {
  bool found = false;
  for (std::size_t t = 0; t < list.size(); ++t) {
    const DataType dtype = list[t]->GetDataType();
    for (std::size_t i = 0; i < list[t]->Size(); ++i) {
      RefStore(dtype, bytes[t].data(), i, RefMultiply(RefLoad(dtype, bytes[t].data(), i), factor));
      found = found || !RefFinite(dtype, bytes[t].data(), i);
    }
  }
  return found;
}

inline bool RefHasNonFinite(const std::vector<TensorPtr>& list) {
  for (const auto& t : list) {
    const Bytes bytes = BytesOf(t);
    for (std::size_t i = 0; i < t->Size(); ++i) {
      if (!RefFinite(t->GetDataType(), bytes.data(), i)) {
        return true;
      }
    }
  }
  return false;
}

/// FP64 sum of (factor * x)^2.
inline double RefSumOfSquares(const std::vector<TensorPtr>& list, float factor) {
  double sum = 0.0;
  for (const auto& t : list) {
    const Bytes bytes = BytesOf(t);
    for (std::size_t i = 0; i < t->Size(); ++i) {
      const double v = RefLoad(t->GetDataType(), bytes.data(), i);
      sum += v * v;
    }
  }
  return sum * static_cast<double>(factor) * static_cast<double>(factor);
}

/// dst = round_to_dst(src * factor) on copies of dst; returns the flag of the written values.
inline bool RefCast(const std::vector<TensorPtr>& src, const std::vector<TensorPtr>& dst, std::vector<Bytes>& out,
                    float factor) {
  bool found = false;
  for (std::size_t t = 0; t < src.size(); ++t) {
    const Bytes in = BytesOf(src[t]);
    const DataType s = src[t]->GetDataType();
    const DataType d = dst[t]->GetDataType();
    for (std::size_t i = 0; i < src[t]->Size(); ++i) {
      RefStore(d, out[t].data(), i, RefMultiply(RefLoad(s, in.data(), i), factor));
      found = found || !RefFinite(d, out[t].data(), i);
    }
  }
  return found;
}

/// The instruction-set path a test run asked for through MLFW_CPU_ISA ("" when none).
inline std::string RequestedIsa() {
  const char* value = std::getenv("MLFW_CPU_ISA");
  return value == nullptr ? std::string() : std::string(value);
}

/// Restores the OpenMP thread count that a test changes (omp_set_num_threads) when it ends.
struct ThreadCountGuard {
  int saved = omp_get_max_threads();
  ~ThreadCountGuard() { omp_set_num_threads(saved); }
};

/// New CPU tensors of @p dtype with the shapes of @p list.
inline std::vector<TensorPtr> EmptyLike(const std::vector<TensorPtr>& list, DataType dtype) {
  std::vector<TensorPtr> out;
  out.reserve(list.size());
  for (const auto& t : list) {
    out.push_back(mlframework::backends::cpu::Empty(t->GetShape(), dtype));
  }
  return out;
}

/// The tensors of @p list (values copied) as exact back-to-back views of one buffer per run of
/// equal dtypes, so the backend joins each run into one segment.
inline std::vector<TensorPtr> Packed(const std::vector<TensorPtr>& list) {
  std::vector<TensorPtr> packed;
  std::size_t first = 0;
  while (first < list.size()) {
    std::size_t last = first;
    std::size_t elements = 0;
    while (last < list.size() && list[last]->GetDataType() == list[first]->GetDataType()) {
      elements += list[last++]->Size();
    }
    const TensorPtr base = mlframework::backends::cpu::Empty({elements}, list[first]->GetDataType());
    std::size_t offset = 0;
    for (std::size_t i = first; i < last; ++i) {
      packed.push_back(mlframework::backends::cpu::View(base, offset, list[i]->GetShape()));
      SetBytes(packed.back(), BytesOf(list[i]));
      offset += list[i]->Size();
    }
    first = last;
  }
  return packed;
}

}  // namespace kernel_test
