#pragma once
// Private: 2 MiB pages under large CPU buffers.
//
// Why: a kernel streaming through a buffer in 4 KiB pages runs at a speed that depends on where
// the operating system put those pages. In one process, the same read loop over two identical
// 64 MiB buffers took from 0.80 to 1.02 times as long on the second as on the first, over six
// processes; with 2 MiB pages 0.98 to 1.02. A 2 MiB page also
// takes one TLB entry where 4 KiB pages take 512. Off by default (HugePages(), CpuTensor.hpp):
// on the fused kernels themselves it made no measurable difference on the host measured.
//
// How: Linux transparent huge pages, asked for with madvise(MADV_HUGEPAGE); the kernel's usual
// mode ("madvise") gives them only to memory that asks. A buffer of at least kHugePageBytes
// starts on a 2 MiB boundary, so each whole 2 MiB page in it can be huge; the end past the last
// whole page keeps small pages, so no memory is added. Where there are no transparent huge
// pages (another system, or a kernel without them) the advice does nothing. It changes where
// memory lies, never a result.
#include <cstddef>

namespace mlframework::backends::cpu {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} * 1024 * 1024;

// Asks for huge pages under each whole 2 MiB page inside [pointer, pointer + bytes). Failure
// (no transparent huge pages here) is ignored: the memory keeps small pages.
void AdviseHugePages(void* pointer, std::size_t bytes) noexcept;

}  // namespace mlframework::backends::cpu
