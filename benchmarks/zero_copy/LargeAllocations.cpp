// The program's operator new and delete, counting the bytes of allocations of 64 KiB and more:
// a copy of a gradient into memory the library owns must allocate it, and the library allocates
// through operator new (its tensors and pool blocks), which this program replaces for every
// shared object it loads. bench_zero_copy checks that the count sees the library's allocations.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "../bench_zero_copy.hpp"

namespace {
constexpr std::size_t kLargeAllocation = std::size_t{64} << 10;
std::atomic<std::size_t> g_large_bytes{0};

void* Allocate(std::size_t bytes, std::size_t alignment) {
  if (bytes >= kLargeAllocation) {
    g_large_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  void* p = nullptr;
  if (posix_memalign(&p, std::max(alignment, sizeof(void*)), bytes == 0 ? 1 : bytes) != 0) {
    return nullptr;
  }
  return p;
}
void* AllocateOrThrow(std::size_t bytes, std::size_t alignment) {
  void* p = Allocate(bytes, alignment);
  if (p == nullptr) {
    throw std::bad_alloc();
  }
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return AllocateOrThrow(n, __STDCPP_DEFAULT_NEW_ALIGNMENT__); }
void* operator new[](std::size_t n) { return AllocateOrThrow(n, __STDCPP_DEFAULT_NEW_ALIGNMENT__); }
void* operator new(std::size_t n, std::align_val_t a) { return AllocateOrThrow(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return AllocateOrThrow(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return Allocate(n, __STDCPP_DEFAULT_NEW_ALIGNMENT__);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return Allocate(n, __STDCPP_DEFAULT_NEW_ALIGNMENT__);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Allocate(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

std::size_t mlfw_zc::LargeAllocatedBytes() { return g_large_bytes.load(std::memory_order_relaxed); }
