// The FP8 kernels' driver (Float8Kernels.hpp): each list is cut into chunks of kFloat8ChunkElements
// per tensor, OpenMP threads take the chunks in order (static schedule: each thread walks
// consecutive memory), and each chunk is one call of an element loop of the instruction set's
// Float8KernelSet. A chunk's amax joins its tensor's with an atomic integer max on the magnitude
// bits (an exact maximum: no dependence on threads or chunking, NaN winning).

#include "mlframework/backends/cpu/Float8Kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <mlframework/core/Float8Bits.hpp>
#include <mlframework/core/FloatBits.hpp>
#include <mlframework/core/Threads.hpp>

#include "mlframework/backends/cpu/KernelTable.hpp"

namespace mlframework::backends::cpu {

namespace {

// A chunk: big enough that the per-chunk work (an atomic, a call) vanishes, small enough that a
// list of a few large tensors still spreads over every thread.
constexpr std::size_t kFloat8ChunkElements = 32768;
// Below this many elements in a call, one thread: waking a team costs more than the pass.
constexpr std::size_t kParallelElements = std::size_t{1} << 16;
// The staging buffer of the conversions that go through FP32 (FP16/BF16 sources, FP16/BF16
// destinations): a few KiB, in L1 next to the data.
constexpr std::size_t kStageElements = 2048;

struct Job {
  std::size_t tensor = 0;
  std::size_t begin = 0;
  std::size_t end = 0;
};

// Runs @p fn(job) for each chunk of kFloat8ChunkElements of each of @p tensors, on OpenMP threads
// when the tensors hold kParallelElements or more in all.
template <typename Fn>
void ForEachChunk(std::span<const ITensor* const> tensors, Fn&& fn) {
  std::vector<Job> jobs;
  std::size_t total = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const std::size_t size = tensors[t]->Size();
    total += size;
    for (std::size_t begin = 0; begin < size; begin += kFloat8ChunkElements) {
      jobs.push_back(Job{t, begin, std::min(size, begin + kFloat8ChunkElements)});
    }
  }
  const auto count = static_cast<std::ptrdiff_t>(jobs.size());
  const int threads = total >= kParallelElements && count > 1 ? mlframework::NumThreads() : 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (std::ptrdiff_t j = 0; j < count; ++j) {
    fn(jobs[static_cast<std::size_t>(j)]);
  }
}

void AtomicMax(std::atomic<std::uint32_t>& slot, std::uint32_t value) {
  std::uint32_t current = slot.load(std::memory_order_relaxed);
  while (value > current && !slot.compare_exchange_weak(current, value, std::memory_order_relaxed)) {
  }
}

// The float of the magnitude bits @p bits of @p dtype's own encoding (exact).
float MagnitudeToFloat(DataType dtype, std::uint32_t bits) {
  switch (dtype) {
    case DataType::Float32:
      return detail::BitsAsFloat(bits);
    case DataType::Float16:
      return detail::HalfBitsToFloat(static_cast<std::uint16_t>(bits));
    case DataType::BFloat16:
      return detail::BFloat16BitsToFloat(static_cast<std::uint16_t>(bits));
    case DataType::Float8E4M3FN:
      return detail::Float8E4M3FNBitsToFloat(static_cast<std::uint8_t>(bits));
    case DataType::Float8E5M2:
      return detail::Float8E5M2BitsToFloat(static_cast<std::uint8_t>(bits));
  }
  return 0.0f;
}

const std::byte* DataOf(const ITensor& tensor) { return tensor.HostBytes().data(); }
std::byte* MutableDataOf(ITensor& tensor) { return tensor.MutableHostBytes().data(); }

}  // namespace

const Float8KernelSet& ActiveFloat8Kernels() noexcept {
  static const Float8KernelSet& chosen = []() -> const Float8KernelSet& {
#if defined(MLFW_CPU_X86_KERNELS)
    const std::string_view name = ActiveKernels().name;
    if (name.starts_with("avx512")) {
      return Float8KernelsOf<arch::Avx512>();
    }
    if (name == arch::Avx2::kName) {
      return Float8KernelsOf<arch::Avx2>();
    }
#endif
    return Float8KernelsOf<arch::Portable>();
  }();
  return chosen;
}

std::string_view ActiveFloat8KernelsName() noexcept {
  const Float8KernelSet& set = ActiveFloat8Kernels();
#if defined(MLFW_CPU_X86_KERNELS)
  if (&set == &Float8KernelsOf<arch::Avx512>()) {
    return arch::Avx512::kName;
  }
  if (&set == &Float8KernelsOf<arch::Avx2>()) {
    return arch::Avx2::kName;
  }
#endif
  static_cast<void>(set);
  return arch::Portable::kName;
}

void Float8AmaxKernel(std::span<const ITensor* const> tensors, float* amax) {
  const Float8KernelSet& set = ActiveFloat8Kernels();
  std::vector<std::atomic<std::uint32_t>> bits(tensors.size());
  ForEachChunk(tensors, [&](const Job& job) {
    const ITensor& tensor = *tensors[job.tensor];
    const DataType dtype = tensor.GetDataType();
    const std::size_t element = ElementSize(dtype);
    const std::uint32_t m =
        set.amax_bits[static_cast<std::size_t>(dtype)](DataOf(tensor) + job.begin * element, job.end - job.begin);
    AtomicMax(bits[job.tensor], m);
  });
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    amax[t] = MagnitudeToFloat(tensors[t]->GetDataType(), bits[t].load(std::memory_order_relaxed));
  }
}

void ScaledCastToFloat8Kernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst, const float* scale,
                              float* amax) {
  const Float8KernelSet& set = ActiveFloat8Kernels();
  const KernelSet& widen = ActiveKernels().cached;
  std::vector<std::atomic<std::uint32_t>> bits(src.size());
  ForEachChunk(src, [&](const Job& job) {
    const ITensor& in = *src[job.tensor];
    ITensor& out = *dst[job.tensor];
    const DataType in_dtype = in.GetDataType();
    const Float8KernelSet::CastFn cast = out.GetDataType() == DataType::Float8E4M3FN ? set.cast_e4m3fn : set.cast_e5m2;
    const float s = scale[job.tensor];
    auto* const to = reinterpret_cast<std::uint8_t*>(MutableDataOf(out));
    std::uint32_t m = 0;
    if (in_dtype == DataType::Float32) {
      const auto* from = reinterpret_cast<const float*>(DataOf(in));
      m = cast(from + job.begin, to + job.begin, job.end - job.begin, s);
    } else {
      // FP16/BF16: widened exactly into FP32 a block at a time (the vectorised widening casts of
      // the kernel table), then the FP32 loop; the product is the one `float(x) * s` computes.
      const std::size_t element = ElementSize(in_dtype);
      const KernelSet::CastFn to_float = widen.cast[Slot(in_dtype)][Slot(DataType::Float32)];
      float stage[kStageElements];
      for (std::size_t begin = job.begin; begin < job.end; begin += kStageElements) {
        const std::size_t n = std::min(kStageElements, job.end - begin);
        static_cast<void>(to_float(DataOf(in) + begin * element, stage, n, 1.0f));
        m = std::max(m, cast(stage, to + begin, n, s));
      }
    }
    if (amax != nullptr) {
      AtomicMax(bits[job.tensor], m);
    }
  });
  if (amax != nullptr) {
    for (std::size_t t = 0; t < src.size(); ++t) {
      amax[t] = detail::BitsAsFloat(bits[t].load(std::memory_order_relaxed));
    }
  }
}

void DequantizeFloat8Kernel(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                            const float* scale_inv) {
  const Float8KernelSet& set = ActiveFloat8Kernels();
  const KernelSet& narrow = ActiveKernels().cached;
  ForEachChunk(src, [&](const Job& job) {
    const ITensor& in = *src[job.tensor];
    ITensor& out = *dst[job.tensor];
    const Float8KernelSet::DequantizeFn dequantize =
        in.GetDataType() == DataType::Float8E4M3FN ? set.dequantize_e4m3fn : set.dequantize_e5m2;
    const float s = scale_inv[job.tensor];
    const auto* const from = reinterpret_cast<const std::uint8_t*>(DataOf(in));
    const DataType out_dtype = out.GetDataType();
    if (out_dtype == DataType::Float32) {
      auto* to = reinterpret_cast<float*>(MutableDataOf(out));
      dequantize(from + job.begin, to + job.begin, job.end - job.begin, s);
      return;
    }
    // FP16/BF16: the FP32 products a block at a time, rounded by the kernel table's narrowing
    // cast (factor 1: the rounding of the product alone).
    const std::size_t element = ElementSize(out_dtype);
    const KernelSet::CastFn to_narrow = narrow.cast[Slot(DataType::Float32)][Slot(out_dtype)];
    float stage[kStageElements];
    for (std::size_t begin = job.begin; begin < job.end; begin += kStageElements) {
      const std::size_t n = std::min(kStageElements, job.end - begin);
      dequantize(from + begin, stage, n, s);
      static_cast<void>(to_narrow(stage, MutableDataOf(out) + begin * element, n, 1.0f));
    }
  });
}

}  // namespace mlframework::backends::cpu
