// Run-time choice of the kernel table: once per process, from what the CPU
// (and the operating system, for the AVX-512 register state) supports, or
// from MLFW_CPU_ISA when a test or a benchmark asks for a given path. Also
// once per process: whether calls from memory prefetch in software
// (MLFW_CPU_PREFETCH forces it).

#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include <mlframework/backends/cpu/CpuTensor.hpp>

#include "mlframework/backends/cpu/InstructionSets.hpp"
#include "mlframework/backends/cpu/KernelTable.hpp"

#if defined(MLFW_CPU_X86_KERNELS)
#include <cpuid.h>
#endif

namespace mlframework::backends::cpu {

namespace {

// Whether this CPU (and the operating system, for the AVX-512 register state) runs the kernels
// of the tag Arch.
template <class Arch>
bool Supported() noexcept;

template <>
bool Supported<arch::Portable>() noexcept {
  return true;
}

#if defined(MLFW_CPU_X86_KERNELS)
constexpr bool kX86Kernels = true;

// CPUID leaf @p leaf (subleaf 0) as {eax, ebx, ecx, edx}, all zero where the CPU lacks the leaf.
std::array<unsigned int, 4> CpuId(unsigned int leaf) noexcept {
  std::array<unsigned int, 4> r{};
  if (__get_cpuid_count(leaf, 0, &r[0], &r[1], &r[2], &r[3]) == 0) {
    r = {};
  }
  return r;
}

// clang 14's __builtin_cpu_supports does not know "f16c" (a compile error), so F16C
// is read from CPUID leaf 1 directly (ECX bit 29), which both compilers accept.
template <>
bool Supported<arch::Avx2>() noexcept {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && (CpuId(1)[2] & bit_F16C) != 0;
}

template <>
bool Supported<arch::Avx512>() noexcept {
  // __builtin_cpu_supports also checks that the OS saves the AVX-512 state.
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

template <>
bool Supported<arch::Avx512Bf16>() noexcept {
  return Supported<arch::Avx512>() && __builtin_cpu_supports("avx512bf16");
}

// AVX512_FP16 from CPUID leaf 7 (EDX bit 23): clang 14's __builtin_cpu_supports does not know it.
template <>
bool Supported<arch::Avx512Fp16>() noexcept {
  return Supported<arch::Avx512Bf16>() && (CpuId(7)[3] & (1u << 23)) != 0;
}
#else
constexpr bool kX86Kernels = false;
#endif

// The table of Arch when this build has it and the CPU runs it, else null.
template <class Arch>
const KernelTable* IfSupported() noexcept {
  if constexpr (kX86Kernels || std::is_same_v<Arch, arch::Portable>) {
    return Supported<Arch>() ? &KernelsOf<Arch>() : nullptr;
  } else {
    return nullptr;  // this build has only the portable kernels
  }
}

// The table of the first tag of arch::All that @p take accepts and this CPU runs, or null.
template <class Take, class... Archs>
const KernelTable* FirstSupported(arch::List<Archs...> /*archs*/, const Take& take) noexcept {
  const KernelTable* found = nullptr;
  (void)((take(Archs::kName) && (found = IfSupported<Archs>()) != nullptr) || ...);
  return found;
}

bool Known(std::string_view name) noexcept {
  return [&]<class... Archs>(arch::List<Archs...>) { return ((name == Archs::kName) || ...); }(arch::All{});
}

// The best table this CPU runs (arch::All lists them best first; the portable one runs anywhere).
const KernelTable& Best() noexcept {
  return *FirstSupported(arch::All{}, [](std::string_view /*name*/) { return true; });
}

const KernelTable& Select() noexcept {
  const char* requested = std::getenv("MLFW_CPU_ISA");
  if (requested == nullptr || *requested == '\0') {
    return Best();
  }
  const std::string_view name(requested);
  if (const KernelTable* table =
          FirstSupported(arch::All{}, [&](std::string_view tag_name) { return tag_name == name; })) {
    return *table;
  }
  if (!Known(name)) {
    std::fprintf(stderr,
                 "mlframework: MLFW_CPU_ISA=%s is not one of portable, avx2, avx512, avx512_bf16, avx512_fp16; "
                 "ignored\n",
                 requested);
  }
  // A path the CPU lacks is never forced: InstructionSet() reports what runs instead.
  return Best();
}

// Software prefetch a page ahead helps where the hardware prefetcher stops at each 4 KiB page
// and needs a few misses to lock onto a new stream: on a Xeon every layout ran 10-21% slower
// without it. On an AMD EPYC (Zen 4) the same loops, timed in one process on the same memory, ran
// up to 39% slower with it and never measurably faster: there it is off. Other vendors keep it.
bool PrefetchByDefault() noexcept {
#if defined(MLFW_CPU_X86_KERNELS)
  return !__builtin_cpu_is("amd");
#else
  return true;
#endif
}

bool SelectPrefetch() noexcept {
  const char* requested = std::getenv("MLFW_CPU_PREFETCH");
  if (requested == nullptr || *requested == '\0') {
    return PrefetchByDefault();
  }
  const std::string_view value(requested);
  if (value == "1" || value == "0") {
    return value == "1";
  }
  std::fprintf(stderr, "mlframework: MLFW_CPU_PREFETCH=%s is not 0 or 1; ignored\n", requested);
  return PrefetchByDefault();
}

// Fills the slots @p set leaves empty with the portable kernels of the same slot.
void CompleteFrom(const KernelSet& portable, KernelSet& set) noexcept {
  const auto fill = [](auto& slot, auto kernel) {
    if (slot == nullptr) {
      slot = kernel;
    }
  };
  for (std::size_t d = 0; d < static_cast<std::size_t>(kDataTypeCount); ++d) {
    fill(set.unscale[d], portable.unscale[d]);
    fill(set.non_finite[d], portable.non_finite[d]);
    fill(set.sum_squares[d], portable.sum_squares[d]);
    fill(set.scale[d], portable.scale[d]);
    fill(set.unscale_amax[d], portable.unscale_amax[d]);
    fill(set.non_finite_amax[d], portable.non_finite_amax[d]);
    for (std::size_t t = 0; t < static_cast<std::size_t>(kDataTypeCount); ++t) {
      fill(set.cast[d][t], portable.cast[d][t]);
      fill(set.cast_amax[d][t], portable.cast_amax[d][t]);
    }
  }
}

// The SIMD tables vectorise the FP32, FP16 and BF16 slots only (SimdKernels.hpp); every slot
// with an FP8 dtype runs the portable kernel, which writes the same bits (core/Float8Bits.hpp).
// Completing the chosen table once here keeps the drivers free of a per-call dtype test.
KernelTable Completed(const KernelTable& table) noexcept {
  KernelTable complete = table;
  const KernelTable& portable = KernelsOf<arch::Portable>();
  CompleteFrom(portable.cached, complete.cached);
  CompleteFrom(portable.cached, complete.from_memory);
  CompleteFrom(portable.cached, complete.from_memory_no_prefetch);
  return complete;
}

}  // namespace

const KernelTable& ActiveKernels() noexcept {
  static const KernelTable kActive = Completed(Select());
  return kActive;
}

bool SoftwarePrefetch() noexcept {
  static const bool kOn = ActiveKernels().software_prefetch && SelectPrefetch();
  return kOn;
}

const KernelSet& FromMemoryKernels() noexcept {
  static const KernelSet& set =
      SoftwarePrefetch() ? ActiveKernels().from_memory : ActiveKernels().from_memory_no_prefetch;
  return set;
}

}  // namespace mlframework::backends::cpu
