#include "mlframework/backends/cpu/HugePages.hpp"

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace mlframework::backends::cpu {

void AdviseHugePages([[maybe_unused]] void* pointer, [[maybe_unused]] std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  const std::uintptr_t first = (address + kHugePageBytes - 1) & ~(std::uintptr_t{kHugePageBytes} - 1);
  const std::uintptr_t end = (address + bytes) & ~(std::uintptr_t{kHugePageBytes} - 1);
  if (first < end) {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): madvise takes the page range as a pointer
    (void)madvise(reinterpret_cast<void*>(first), end - first, MADV_HUGEPAGE);
  }
#endif
}

}  // namespace mlframework::backends::cpu
