// Run-time choice of the kernel table: once per process, from what the CPU
// (and the operating system, for the AVX-512 register state) supports, or
// from MLFW_CPU_ISA when a test or a benchmark asks for a given path. Also
// once per process: whether calls from memory prefetch in software
// (MLFW_CPU_PREFETCH forces it).

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <mlframework/backends/cpu/CpuTensor.hpp>

#include "mlframework/backends/cpu/KernelTable.hpp"

#if defined(MLFW_CPU_X86_KERNELS)
#include <cpuid.h>
#endif

namespace mlframework::backends::cpu {

namespace {

#if defined(MLFW_CPU_X86_KERNELS)
bool CpuHasAvx512() {
  // __builtin_cpu_supports also checks that the OS saves the AVX-512 state.
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

bool CpuHasAvx512Bf16() { return CpuHasAvx512() && __builtin_cpu_supports("avx512bf16"); }

// AVX512_FP16 from CPUID leaf 7 (EDX bit 23): clang 14's __builtin_cpu_supports does not know it.
bool CpuHasAvx512Fp16() {
  unsigned int eax = 0;
  unsigned int ebx = 0;
  unsigned int ecx = 0;
  unsigned int edx = 0;
  return CpuHasAvx512Bf16() && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (edx & (1u << 23)) != 0;
}

// clang 14's __builtin_cpu_supports does not know "f16c" (a compile error), so F16C
// is read from CPUID leaf 1 directly (ECX bit 29), which both compilers accept.
bool CpuHasF16c() {
  unsigned int eax = 0;
  unsigned int ebx = 0;
  unsigned int ecx = 0;
  unsigned int edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool CpuHasAvx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c(); }
#endif

const KernelTable& Best() noexcept {
#if defined(MLFW_CPU_X86_KERNELS)
  if (CpuHasAvx512Fp16()) {
    return Avx512Fp16Kernels();
  }
  if (CpuHasAvx512Bf16()) {
    return Avx512Bf16Kernels();
  }
  if (CpuHasAvx512()) {
    return Avx512Kernels();
  }
  if (CpuHasAvx2()) {
    return Avx2Kernels();
  }
#endif
  return PortableKernels();
}

const KernelTable& Select() noexcept {
  const char* requested = std::getenv("MLFW_CPU_ISA");
  if (requested == nullptr || *requested == '\0') {
    return Best();
  }
  const std::string_view name(requested);
  if (name == "portable") {
    return PortableKernels();
  }
#if defined(MLFW_CPU_X86_KERNELS)
  if (name == "avx2" && CpuHasAvx2()) {
    return Avx2Kernels();
  }
  if (name == "avx512" && CpuHasAvx512()) {
    return Avx512Kernels();
  }
  if (name == "avx512_bf16" && CpuHasAvx512Bf16()) {
    return Avx512Bf16Kernels();
  }
  if (name == "avx512_fp16" && CpuHasAvx512Fp16()) {
    return Avx512Fp16Kernels();
  }
#endif
  if (name != "avx2" && name != "avx512" && name != "avx512_bf16" && name != "avx512_fp16") {
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
// without it (docs/BENCHMARKS.md, session 6). On an AMD EPYC (Zen 4) the same loops, timed in one
// process on the same memory, ran up to 39% slower with it and never measurably faster (session
// 15): there it is off. Other vendors keep it.
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

}  // namespace

const KernelTable& ActiveKernels() noexcept {
  static const KernelTable& active = Select();
  return active;
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
