#include "mlframework/backends/cpu/MultiTensorKernels.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include <omp.h>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/core/FloatBits.hpp>

#include "mlframework/backends/cpu/CpuTensorImpl.hpp"

namespace mlframework::backends::cpu {

namespace {

// ---- element math, once per dtype --------------------------------------------------------

template <DataType D>
float Load(const void* base, std::size_t i) {
  if constexpr (D == DataType::Float32) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (D == DataType::Float16) {
    return detail::HalfBitsToFloat(static_cast<const std::uint16_t*>(base)[i]);
  } else {
    return detail::BFloat16BitsToFloat(static_cast<const std::uint16_t*>(base)[i]);
  }
}

template <DataType D>
void Store(void* base, std::size_t i, float value) {
  if constexpr (D == DataType::Float32) {
    static_cast<float*>(base)[i] = value;
  } else if constexpr (D == DataType::Float16) {
    static_cast<std::uint16_t*>(base)[i] = detail::FloatToHalfBits(value);
  } else {
    static_cast<std::uint16_t*>(base)[i] = detail::FloatToBFloat16Bits(value);
  }
}

// Finite test on the stored bits: no conversion needed.
template <DataType D>
bool IsFiniteAt(const void* base, std::size_t i) {
  if constexpr (D == DataType::Float32) {
    return detail::IsFiniteFloat(static_cast<const float*>(base)[i]);
  } else if constexpr (D == DataType::Float16) {
    return (static_cast<const std::uint16_t*>(base)[i] & 0x7c00u) != 0x7c00u;
  } else {
    return (static_cast<const std::uint16_t*>(base)[i] & 0x7f80u) != 0x7f80u;
  }
}

// Calls fn.template operator()<D>() for the runtime dtype: the one dtype branch per piece.
template <typename Fn>
decltype(auto) DispatchDtype(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::Float16:
      return fn.template operator()<DataType::Float16>();
    case DataType::BFloat16:
      return fn.template operator()<DataType::BFloat16>();
    case DataType::Float32:
      break;
  }
  return fn.template operator()<DataType::Float32>();
}

// ---- chunk plan --------------------------------------------------------------------------

struct Segment {
  void* data;
  DataType dtype;
};

// The list as one virtual array: offsets[i] is where tensor i starts.
struct Plan {
  std::vector<Segment> segments;
  std::vector<std::size_t> offsets;  // size segments + 1
  std::size_t total = 0;
  std::size_t chunks = 0;

  template <typename TensorPointer>
  explicit Plan(std::span<TensorPointer const> tensors) {
    segments.reserve(tensors.size());
    offsets.reserve(tensors.size() + 1);
    for (TensorPointer tensor : tensors) {
      offsets.push_back(total);
      segments.push_back(Segment{const_cast<void*>(Data(*tensor)), tensor->GetDataType()});
      total += tensor->Size();
    }
    offsets.push_back(total);
    chunks = (total + kChunkElements - 1) / kChunkElements;
  }

  // Calls fn(segment, begin, end) for each piece of chunk c, in order.
  template <typename Fn>
  void ForEachPiece(std::size_t chunk, Fn&& fn) const {
    const std::size_t begin = chunk * kChunkElements;
    const std::size_t end = std::min(total, begin + kChunkElements);
    auto it = std::upper_bound(offsets.begin(), offsets.end(), begin);
    std::size_t s = static_cast<std::size_t>(it - offsets.begin()) - 1;
    for (std::size_t pos = begin; pos < end; ++s) {
      const std::size_t seg_end = std::min(end, offsets[s + 1]);
      if (seg_end > pos) {
        fn(s, pos - offsets[s], seg_end - offsets[s]);
      }
      pos = std::max(pos, seg_end);
    }
  }
};

// Threads only when there is more than one chunk: a fork costs more than a small list.
bool Parallel(const Plan& plan) { return plan.chunks > 1 && omp_get_max_threads() > 1; }

// ---- typed piece kernels -------------------------------------------------------------------

template <DataType D>
bool UnscalePiece(void* data, std::size_t begin, std::size_t end, float factor) {
  bool all_finite = true;
  for (std::size_t i = begin; i < end; ++i) {
    Store<D>(data, i, Load<D>(data, i) * factor);
    all_finite &= IsFiniteAt<D>(data, i);
  }
  return !all_finite;
}

template <DataType D>
bool NonFinitePiece(const void* data, std::size_t begin, std::size_t end) {
  bool all_finite = true;
  for (std::size_t i = begin; i < end; ++i) {
    all_finite &= IsFiniteAt<D>(data, i);
  }
  return !all_finite;
}

template <DataType D>
float SumSquaresPiece(const void* data, std::size_t begin, std::size_t end) {
  // Eight independent FP32 accumulators: shorter dependency chains and smaller rounding error.
  float acc[8] = {};
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    for (std::size_t k = 0; k < 8; ++k) {
      const float v = Load<D>(data, i + k);
      acc[k] += v * v;
    }
  }
  for (; i < end; ++i) {
    const float v = Load<D>(data, i);
    acc[0] += v * v;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <DataType D>
void ScalePiece(void* data, std::size_t begin, std::size_t end, float factor) {
  for (std::size_t i = begin; i < end; ++i) {
    Store<D>(data, i, Load<D>(data, i) * factor);
  }
}

template <DataType S, DataType T>
bool CastPiece(const void* src, void* dst, std::size_t begin, std::size_t end, float factor) {
  bool all_finite = true;
  for (std::size_t i = begin; i < end; ++i) {
    Store<T>(dst, i, Load<S>(src, i) * factor);
    all_finite &= IsFiniteAt<T>(dst, i);
  }
  return !all_finite;
}

}  // namespace

bool UnscaleAndCheckKernel(std::span<ITensor* const> tensors, float factor) {
  const Plan plan(tensors);
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (Parallel(plan))
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& seg = plan.segments[s];
      found |= DispatchDtype(seg.dtype, [&]<DataType D>() { return UnscalePiece<D>(seg.data, begin, end, factor); })
                   ? 1
                   : 0;
    });
  }
  return found != 0;
}

bool HasNonFiniteKernel(std::span<const ITensor* const> tensors) {
  const Plan plan(tensors);
  std::atomic<bool> found{false};
#pragma omp parallel for schedule(static) if (Parallel(plan))
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    if (found.load(std::memory_order_relaxed)) {
      continue;  // early exit: the rest of the chunks are skipped
    }
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& seg = plan.segments[s];
      if (DispatchDtype(seg.dtype, [&]<DataType D>() { return NonFinitePiece<D>(seg.data, begin, end); })) {
        found.store(true, std::memory_order_relaxed);
      }
    });
  }
  return found.load();
}

NonFiniteAndNorm CheckAndSumSquaresKernel(std::span<const ITensor* const> tensors, float factor) {
  const Plan plan(tensors);
  // One FP32 partial per chunk, summed in FP64 in chunk order: the result does
  // not depend on the thread count.
  std::vector<double> partials(plan.chunks, 0.0);
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (Parallel(plan))
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    double chunk_sum = 0.0;
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& seg = plan.segments[s];
      DispatchDtype(seg.dtype, [&]<DataType D>() {
        found |= NonFinitePiece<D>(seg.data, begin, end) ? 1 : 0;
        chunk_sum += static_cast<double>(SumSquaresPiece<D>(seg.data, begin, end));
      });
    });
    partials[c] = chunk_sum;
  }
  double total = 0.0;
  for (const double p : partials) {
    total += p;
  }
  const double f = factor;
  return NonFiniteAndNorm{found != 0, total * f * f};
}

void ScaleKernel(std::span<ITensor* const> tensors, float factor) {
  const Plan plan(tensors);
#pragma omp parallel for schedule(static) if (Parallel(plan))
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& seg = plan.segments[s];
      DispatchDtype(seg.dtype, [&]<DataType D>() { ScalePiece<D>(seg.data, begin, end, factor); });
    });
  }
}

bool CastIntoKernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor) {
  const Plan src_plan(src);
  const Plan dst_plan(dst);  // same sizes pairwise (checked by the caller), so the same chunks
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (Parallel(src_plan))
  for (std::size_t c = 0; c < src_plan.chunks; ++c) {
    src_plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& in = src_plan.segments[s];
      const Segment& out = dst_plan.segments[s];
      DispatchDtype(in.dtype, [&]<DataType S>() {
        DispatchDtype(out.dtype, [&]<DataType T>() {
          found |= CastPiece<S, T>(in.data, out.data, begin, end, factor) ? 1 : 0;
        });
      });
    });
  }
  return found != 0;
}

void WidenToFloat(const void* src, DataType dtype, float* dst, std::size_t count) {
  DispatchDtype(dtype, [&]<DataType D>() {
    for (std::size_t i = 0; i < count; ++i) {
      dst[i] = Load<D>(src, i);
    }
  });
}

void NarrowFromFloat(const float* src, void* dst, DataType dtype, std::size_t count) {
  DispatchDtype(dtype, [&]<DataType D>() {
    for (std::size_t i = 0; i < count; ++i) {
      Store<D>(dst, i, src[i]);
    }
  });
}

// ---- the backend object ------------------------------------------------------------------

namespace {

class CpuBackend final : public TensorBackend {
 public:
  std::string_view Name() const noexcept override { return "cpu"; }
  bool UnscaleAndCheck(std::span<ITensor* const> tensors, float factor) const override {
    return UnscaleAndCheckKernel(tensors, factor);
  }
  bool HasNonFinite(std::span<const ITensor* const> tensors) const override { return HasNonFiniteKernel(tensors); }
  NonFiniteAndNorm CheckAndSumSquares(std::span<const ITensor* const> tensors, float factor) const override {
    return CheckAndSumSquaresKernel(tensors, factor);
  }
  void Scale(std::span<ITensor* const> tensors, float factor) const override { ScaleKernel(tensors, factor); }
  bool CastInto(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor) const override {
    return CastIntoKernel(src, dst, factor);
  }
};

}  // namespace

const TensorBackend& Backend() noexcept {
  static const CpuBackend kBackend;
  return kBackend;
}

std::string_view InstructionSet() noexcept { return "portable"; }

}  // namespace mlframework::backends::cpu
