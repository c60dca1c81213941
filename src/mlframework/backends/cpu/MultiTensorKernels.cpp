#include "mlframework/backends/cpu/MultiTensorKernels.hpp"

#include <atomic>
#include <vector>

#include <mlframework/core/FloatBits.hpp>

#include "mlframework/backends/cpu/KernelTable.hpp"
#include "mlframework/backends/cpu/Planning.hpp"
#include "mlframework/backends/cpu/ScalarElements.hpp"
#include "mlframework/core/ParallelWork.hpp"

namespace mlframework::backends::cpu {

using scalar::DispatchDtype;

namespace {

// The kernels for a call over @p bytes of memory (see kFromMemoryBytes).
const KernelSet& KernelsFor(std::size_t bytes) {
  return FromMemory(bytes) ? FromMemoryKernels() : ActiveKernels().cached;
}

// The threads of a pass over @p plan: the library's count (NumThreads()), one for a list below
// kParallelMinElements or of one chunk, where waking threads costs more than it saves.
int Threads(const Plan& plan) { return plan.chunks > 1 ? mlframework::detail::RegionThreads(plan.total) : 1; }

// FP64 sum of squares of a piece, for the rare piece whose FP32 partial overflowed
// although every element is finite (elements above about 1e19).
double SumSquaresFp64(const void* data, DataType dtype, std::size_t count) {
  return DispatchDtype(dtype, [&]<DataType D>() {
    double sum = 0.0;
    for (std::size_t i = 0; i < count; ++i) {
      const double v = scalar::Load<D>(data, i);
      sum += v * v;
    }
    return sum;
  });
}

// One pass over @p plan that folds what @p piece(segment, begin, end, &amax) returns, the
// piece's non-finite flag, and the amax it raises. Each thread folds its pieces into one amax
// (a max is exact in any order, so the result does not depend on the thread count).
template <typename Piece>
NonFiniteAndAmax CheckPass(const Plan& plan, Piece&& piece) {
  int found = 0;
  float amax = 0.0f;
  const int threads = Threads(plan);
#pragma omp parallel for schedule(static) reduction(|                      \
                                                    : found) reduction(max \
                                                                       : amax) num_threads(threads) if (threads > 1)
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      found |= piece(plan.segments[s], begin, end, &amax) ? 1 : 0;
    });
  }
  return {found != 0, amax};
}

// CheckPass over pairs of lists: @p piece(in, out, begin, end, &amax) per piece. A destination
// that comes with more memory than the caches hold will be evicted before anyone reads it: the
// from_memory casts write it with non-temporal stores, which also skip reading the old lines in
// first.
template <typename Piece>
NonFiniteAndAmax PairPass(const PairPlans& plans, Piece&& piece) {
  const Plan& src_plan = plans.first;   // named references, not a structured binding: clang 14
  const Plan& dst_plan = plans.second;  // cannot capture those in the OpenMP region's lambda
  const bool streaming = FromMemory(src_plan.bytes + dst_plan.bytes);
  int found = 0;
  float amax = 0.0f;
  const int threads = Threads(src_plan);
#pragma omp parallel for schedule(static) reduction(|                      \
                                                    : found) reduction(max \
                                                                       : amax) num_threads(threads) if (threads > 1)
  for (std::size_t c = 0; c < src_plan.chunks; ++c) {
    src_plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      found |= piece(src_plan.segments[s], dst_plan.segments[s], begin, end, &amax) ? 1 : 0;
    });
    if (streaming) {
      // Non-temporal stores are weakly ordered: a full fence (MFENCE on x86) makes this
      // chunk's visible before any thread reads it. Once per chunk, not once per tensor.
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
  }
  return {found != 0, amax};
}

}  // namespace

bool UnscaleAndCheckKernel(const Plan& plan, float factor) {
  const KernelSet& kernels = KernelsFor(plan.bytes);
  return CheckPass(plan,
                   [&](const Segment& seg, std::size_t begin, std::size_t end, float* /*amax*/) {
                     return kernels.unscale[Slot(seg.dtype)](seg.At(begin), end - begin, factor);
                   })
      .FoundNonFinite;
}

bool HasNonFiniteKernel(const Plan& plan) {
  const KernelSet& kernels = KernelsFor(plan.bytes);
  std::atomic<bool> found{false};
  const int threads = Threads(plan);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    if (found.load(std::memory_order_relaxed)) {
      continue;  // early exit: the rest of the chunks are skipped
    }
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& seg = plan.segments[s];
      if (kernels.non_finite[Slot(seg.dtype)](seg.At(begin), end - begin)) {
        found.store(true, std::memory_order_relaxed);
      }
    });
  }
  return found.load();
}

NonFiniteAndNorm CheckAndSumSquaresKernel(const Plan& plan, float factor) {
  const KernelSet& kernels = KernelsFor(plan.bytes);
  // One partial per chunk (FP32 sums of its pieces, added in FP64), the partials summed
  // in FP64 in chunk order: the result does not depend on the thread count.
  std::vector<double> partials(plan.chunks, 0.0);
  int found = 0;
  const int threads = Threads(plan);
#pragma omp parallel for schedule(static) reduction(| : found) num_threads(threads) if (threads > 1)
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    double chunk_sum = 0.0;
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& seg = plan.segments[s];
      const void* first = seg.At(begin);
      const float piece = kernels.sum_squares[Slot(seg.dtype)](first, end - begin);
      if (detail::IsFiniteFloat(piece)) {
        // A finite sum of squares proves every element finite: the check costs nothing.
        chunk_sum += static_cast<double>(piece);
      } else if (kernels.non_finite[Slot(seg.dtype)](first, end - begin)) {
        found = 1;
        chunk_sum += static_cast<double>(piece);
      } else {
        chunk_sum += SumSquaresFp64(first, seg.dtype, end - begin);
      }
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

void ScaleKernel(const Plan& plan, float factor) {
  const KernelSet& kernels = KernelsFor(plan.bytes);
  const int threads = Threads(plan);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    plan.ForEachPiece(c, [&](std::size_t s, std::size_t begin, std::size_t end) {
      const Segment& seg = plan.segments[s];
      kernels.scale[Slot(seg.dtype)](seg.At(begin), end - begin, factor);
    });
  }
}

bool CastKernel(const PairPlans& plans, float factor) {
  const auto& cast = KernelsFor(plans.first.bytes + plans.second.bytes).cast;
  return PairPass(plans,
                  [&](const Segment& in, const Segment& out, std::size_t begin, std::size_t end, float* /*amax*/) {
                    return cast[Slot(in.dtype)][Slot(out.dtype)](in.At(begin), out.At(begin), end - begin, factor);
                  })
      .FoundNonFinite;
}

NonFiniteAndAmax UnscaleCheckAndAmaxKernel(const Plan& plan, float factor) {
  const KernelSet& kernels = KernelsFor(plan.bytes);
  return CheckPass(plan, [&](const Segment& seg, std::size_t begin, std::size_t end, float* amax) {
    return kernels.unscale_amax[Slot(seg.dtype)](seg.At(begin), end - begin, factor, amax);
  });
}

NonFiniteAndAmax CheckAndAmaxKernel(const Plan& plan) {
  const KernelSet& kernels = KernelsFor(plan.bytes);
  return CheckPass(plan, [&](const Segment& seg, std::size_t begin, std::size_t end, float* amax) {
    return kernels.non_finite_amax[Slot(seg.dtype)](seg.At(begin), end - begin, amax);
  });
}

NonFiniteAndAmax CastAndAmaxKernel(const PairPlans& plans, float factor) {
  const auto& cast = KernelsFor(plans.first.bytes + plans.second.bytes).cast_amax;
  return PairPass(plans, [&](const Segment& in, const Segment& out, std::size_t begin, std::size_t end, float* amax) {
    return cast[Slot(in.dtype)][Slot(out.dtype)](in.At(begin), out.At(begin), end - begin, factor, amax);
  });
}

bool UnscaleAndCheckKernel(std::span<ITensor* const> tensors, float factor) {
  return UnscaleAndCheckKernel(*PlanOf(tensors), factor);
}

bool HasNonFiniteKernel(std::span<const ITensor* const> tensors) { return HasNonFiniteKernel(*PlanOf(tensors)); }

NonFiniteAndNorm CheckAndSumSquaresKernel(std::span<const ITensor* const> tensors, float factor) {
  return CheckAndSumSquaresKernel(*PlanOf(tensors), factor);
}

void ScaleKernel(std::span<ITensor* const> tensors, float factor) { ScaleKernel(*PlanOf(tensors), factor); }

bool CastIntoKernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst, float factor) {
  return CastKernel(*PlansOf(src, dst), factor);
}

NonFiniteAndAmax UnscaleCheckAndAmaxKernel(std::span<ITensor* const> tensors, float factor) {
  return UnscaleCheckAndAmaxKernel(*PlanOf(tensors), factor);
}

NonFiniteAndAmax CastIntoAndAmaxKernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                       float factor) {
  return CastAndAmaxKernel(*PlansOf(src, dst), factor);
}

void WidenToFloat(const void* src, DataType dtype, float* dst, std::size_t count) {
  DispatchDtype(dtype, [&]<DataType D>() {
    for (std::size_t i = 0; i < count; ++i) {
      dst[i] = scalar::Load<D>(src, i);
    }
  });
}

void NarrowFromFloat(const float* src, void* dst, DataType dtype, std::size_t count) {
  DispatchDtype(dtype, [&]<DataType D>() {
    for (std::size_t i = 0; i < count; ++i) {
      scalar::Store<D>(dst, i, src[i]);
    }
  });
}

}  // namespace mlframework::backends::cpu
