// Portable element kernels: the scalar functions of core/FloatBits.hpp, one
// template per dtype. Built with the project's baseline flags, so they run on
// every CPU; they are also the reference the SIMD tables must match bit for bit. They fill every
// dtype's slots, the FP8 ones included: the SIMD tables leave those empty and ActiveKernels()
// takes them from here (KernelDispatch.cpp).

#include <cstddef>
#include <utility>

#include "mlframework/backends/cpu/InstructionSets.hpp"
#include "mlframework/backends/cpu/KernelTable.hpp"
#include "mlframework/backends/cpu/ScalarElements.hpp"

namespace mlframework::backends::cpu {

namespace {

using scalar::IsFiniteAt;
using scalar::Load;
using scalar::Store;

template <DataType D>
bool NonFinite(const void* data, std::size_t count) {
  bool all_finite = true;
  for (std::size_t i = 0; i < count; ++i) {
    all_finite &= IsFiniteAt<D>(data, i);
  }
  return !all_finite;
}

template <DataType D>
float SumSquares(const void* data, std::size_t count) {
  // Scalar code pays nothing for FP64 accumulators, and one FP32 accumulator per
  // few thousand squares would drift past the 1e-6 error budget; the piece's sum
  // is still handed back as an FP32 partial, like the SIMD tables do.
  double acc[4] = {};
  std::size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    for (std::size_t k = 0; k < 4; ++k) {
      const double v = Load<D>(data, i + k);
      acc[k] += v * v;
    }
  }
  for (; i < count; ++i) {
    const double v = Load<D>(data, i);
    acc[0] += v * v;
  }
  return static_cast<float>((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

template <DataType D>
void Scale(void* data, std::size_t count, float factor) {
  for (std::size_t i = 0; i < count; ++i) {
    Store<D>(data, i, Load<D>(data, i) * factor);
  }
}

template <DataType S, DataType T>
bool Cast(const void* src, void* dst, std::size_t count, float factor) {
  bool all_finite = true;
  for (std::size_t i = 0; i < count; ++i) {
    Store<T>(dst, i, Load<S>(src, i) * factor);
    all_finite &= IsFiniteAt<T>(dst, i);
  }
  return !all_finite;
}

// |v| when v is finite, else 0 (the amax leaves Inf and NaN out).
float FiniteAbs(float v) {
  const float a = v < 0.0f ? -v : v;
  return detail::IsFiniteFloat(a) ? a : 0.0f;
}

template <DataType D>
bool NonFiniteAmax(const void* data, std::size_t count, float* amax) {
  bool all_finite = true;
  float peak = *amax;
  for (std::size_t i = 0; i < count; ++i) {
    const float a = FiniteAbs(Load<D>(data, i));
    peak = a > peak ? a : peak;
    all_finite &= IsFiniteAt<D>(data, i);
  }
  *amax = peak;
  return !all_finite;
}

template <DataType S, DataType T>
bool CastAmax(const void* src, void* dst, std::size_t count, float factor, float* amax) {
  bool all_finite = true;
  float peak = *amax;
  for (std::size_t i = 0; i < count; ++i) {
    const float v = Load<S>(src, i) * factor;
    const float a = FiniteAbs(v);
    peak = a > peak ? a : peak;
    Store<T>(dst, i, v);
    all_finite &= IsFiniteAt<T>(dst, i);
  }
  *amax = peak;
  return !all_finite;
}

// The in-place forms are the casts with one buffer on both sides.
template <DataType D>
bool Unscale(void* data, std::size_t count, float factor) {
  return Cast<D, D>(data, data, count, factor);
}

template <DataType D>
bool UnscaleAmax(void* data, std::size_t count, float factor, float* amax) {
  return CastAmax<D, D>(data, data, count, factor, amax);
}

template <DataType S, std::size_t... T>
constexpr void FillCastRow(KernelSet& set, std::index_sequence<T...> /*dtypes*/) {
  ((set.cast[Slot(S)][T] = &Cast<S, static_cast<DataType>(T)>), ...);
  ((set.cast_amax[Slot(S)][T] = &CastAmax<S, static_cast<DataType>(T)>), ...);
}

// Every slot of every dtype, generated from the one list in DataType.hpp.
template <std::size_t... D>
constexpr KernelSet MakePortableSet(std::index_sequence<D...> dtypes) {
  KernelSet set{};
  ((set.unscale[D] = &Unscale<static_cast<DataType>(D)>), ...);
  ((set.non_finite[D] = &NonFinite<static_cast<DataType>(D)>), ...);
  ((set.sum_squares[D] = &SumSquares<static_cast<DataType>(D)>), ...);
  ((set.scale[D] = &Scale<static_cast<DataType>(D)>), ...);
  ((set.unscale_amax[D] = &UnscaleAmax<static_cast<DataType>(D)>), ...);
  ((set.non_finite_amax[D] = &NonFiniteAmax<static_cast<DataType>(D)>), ...);
  (FillCastRow<static_cast<DataType>(D)>(set, dtypes), ...);
  return set;
}

}  // namespace

template <>
const KernelTable& KernelsOf<arch::Portable>() noexcept {
  static constexpr KernelSet kSet = MakePortableSet(std::make_index_sequence<kDataTypeCount>{});
  // One set for both kinds of call: portable code has no prefetch and no non-temporal store.
  static constexpr KernelTable kTable{arch::Portable::kName, kSet, kSet, kSet, false};
  return kTable;
}

}  // namespace mlframework::backends::cpu
