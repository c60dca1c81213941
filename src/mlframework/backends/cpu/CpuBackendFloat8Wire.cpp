// The CPU backend's FP8 block wire kernels (TensorBackend.hpp): the reductions of
// distributed/Float8BlockReduce.hpp have checked every argument, so these run the wire's CPU
// codec on the tensors' host memory.

#include <cstddef>
#include <cstdint>

#include "mlframework/backends/cpu/CpuBackend.hpp"
#include "mlframework/distributed/Float8BlockCodec.hpp"

namespace mlframework::backends::cpu {

void CpuBackend::EncodeFloat8Blocks(const ITensor& values, const Float8BlockRuns& runs, ITensor& codes,
                                    ITensor& scale_inv) const {
  const auto* x = reinterpret_cast<const float*>(values.HostBytes().data());
  auto* out = reinterpret_cast<std::uint8_t*>(codes.MutableHostBytes().data());
  auto* scales = reinterpret_cast<float*>(scale_inv.MutableHostBytes().data());
  const std::size_t blocks = distributed::detail::Float8BlockCount(runs.Length);
  for (std::size_t r = 0; r < runs.Runs; ++r) {
    distributed::detail::EncodeFloat8Blocks(x + runs.Offset + (r * runs.Stride), runs.Length, out + (r * runs.Length),
                                            scales + (r * blocks));
  }
}

void CpuBackend::DecodeSumFloat8Blocks(const ITensor& codes, const ITensor& scale_inv, std::size_t parts,
                                       std::size_t length, ITensor& out, std::size_t offset) const {
  const auto* c = reinterpret_cast<const std::uint8_t*>(codes.HostBytes().data());
  const auto* scales = reinterpret_cast<const float*>(scale_inv.HostBytes().data());
  auto* sums = reinterpret_cast<float*>(out.MutableHostBytes().data());
  distributed::detail::DecodeSumFloat8Blocks(c, scales, static_cast<int>(parts), length, sums + offset);
}

}  // namespace mlframework::backends::cpu
