#include "mlframework/backends/cuda/Cast.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/MultiTensorApply.cuh"

namespace mlframework::backends::cuda {

namespace {

// kAmax: also raises *amax to the largest finite |src * factor| (a separate instantiation).
template <bool kAmax>
__global__ void __launch_bounds__(kBlockThreads)
    CastKernel(const __grid_constant__ LaunchTable table, FactorSource factor_source, std::int32_t* flag, float* amax) {
  const TableView list = table.View();
  const float factor = ResolveFactor(factor_source);
  bool found = false;
  float peak = 0.0f;
  ForEachPair(list, [&](auto src_tag, auto dst_tag, const auto* src, auto* dst, std::uint64_t lo, std::uint64_t hi) {
    constexpr DataType S = decltype(src_tag)::value;
    constexpr DataType T = decltype(dst_tag)::value;
    ForEachElement(
        lo, hi, [&](std::uint64_t i) { return src[i]; },
        [&](std::uint64_t i, StoredType<S> x) {
          if constexpr (kAmax) {
            const float product = ToFloat<S>(x) * factor;
            RaisePeak(peak, product);
            const StoredType<T> out = FromFloat<T>(product);
            dst[i] = out;
            found |= !IsFiniteStored<T>(out);
          } else {
            const StoredType<T> out = ScaleConvert<S, T>(x, factor);
            dst[i] = out;
            found |= !IsFiniteStored<T>(out);
          }
        });
  });
  BlockRaiseFlag(found, flag);
  if constexpr (kAmax) {
    BlockRaiseAmax(peak, amax);
  }
}

}  // namespace

void LaunchCast(const Launch& launch, FactorSource factor, std::int32_t* flag, cudaStream_t stream) {
  CastKernel<false><<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, factor, flag, nullptr);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchCastAmax(const Launch& launch, FactorSource factor, std::int32_t* flag, float* amax, cudaStream_t stream) {
  CastKernel<true><<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, factor, flag, amax);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
