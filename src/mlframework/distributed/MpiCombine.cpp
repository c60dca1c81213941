// The all-to-all reductions' local combine, shared by MpiProcessGroup's blocking calls and the
// non-blocking ones of MpiAsync.cpp, so both give the same bits.
#include <algorithm>
#include <array>
#include <cstddef>

#include <mlframework/core/HostConversion.hpp>
#include <mlframework/core/Threads.hpp>

#include "mlframework/distributed/MpiAsync.hpp"

namespace mlframework::distributed::detail {

// The all-to-all reductions' local step, of the blocking calls too: out[i] = combine over p of
// parts[p * count + i] in FP32, in rank order (so every rank gets the same bits), rounded once
// for FP16/BF16. Blocks of kCombineBlock elements stay in L1 between the steps.
void CombineParts(const void* parts, int part_count, std::size_t count, DataType dtype, ReduceOp op, void* out) {
  constexpr std::size_t kCombineBlock = 4096;
  const std::size_t element = ElementSize(dtype);
  const auto* first = static_cast<const std::byte*>(parts);
  const auto blocks = static_cast<std::ptrdiff_t>((count + kCombineBlock - 1) / kCombineBlock);
  // Only messages of several blocks are worth waking the other threads for.
#pragma omp parallel for schedule(static) num_threads(mlframework::NumThreads()) if (blocks >= 16)
  for (std::ptrdiff_t block = 0; block < blocks; ++block) {
    std::array<float, kCombineBlock> acc{};
    std::array<float, kCombineBlock> next{};
    const std::size_t start = static_cast<std::size_t>(block) * kCombineBlock;
    const std::size_t n = std::min<std::size_t>(kCombineBlock, count - start);
    const auto part = [&](int p) { return first + (static_cast<std::size_t>(p) * count + start) * element; };
    ConvertHostElements(part(0), dtype, acc.data(), DataType::Float32, n);
    for (int p = 1; p < part_count; ++p) {
      ConvertHostElements(part(p), dtype, next.data(), DataType::Float32, n);
      if (op == ReduceOp::Max) {
        for (std::size_t i = 0; i < n; ++i) acc[i] = next[i] > acc[i] ? next[i] : acc[i];
      } else {
        for (std::size_t i = 0; i < n; ++i) acc[i] += next[i];
      }
    }
    ConvertHostElements(acc.data(), DataType::Float32, static_cast<std::byte*>(out) + start * element, dtype, n);
  }
}

}  // namespace mlframework::distributed::detail
