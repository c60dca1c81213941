#include "mlframework/backends/cuda/Unscale.cuh"

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/MultiTensorApply.cuh"

namespace mlframework::backends::cuda {

namespace {

// kAmax: also raises *amax to the largest finite |x * factor| (a separate instantiation: the
// kernel without it is the plain one).
template <bool kAmax>
__global__ void __launch_bounds__(kBlockThreads, kMinBlocksPerMultiprocessor)
    UnscaleKernel(const __grid_constant__ LaunchTable table, FactorSource factor_source, std::int32_t* flag,
                  float* amax) {
  const TableView list = table.View();
  const float factor = ResolveFactor(factor_source);
  bool found = false;
  float peak = 0.0f;
  ForEachPiece(list, [&](int s, std::uint64_t lo, std::uint64_t hi) {
    DispatchDtype(list.dtype[0][s], [&](auto tag) {
      constexpr DataType D = decltype(tag)::value;
      auto* data = static_cast<StoredType<D>*>(list.data[0][s]);
      ForEachStored<true>(data, lo, hi, [&](StoredType<D> x) {
        if constexpr (kAmax) {
          const float product = ToFloat<D>(x) * factor;
          RaisePeak(peak, product);
          const StoredType<D> out = FromFloat<D>(product);
          found |= !IsFiniteStored<D>(out);
          return out;
        } else {
          const StoredType<D> out = ScaleConvert<D, D>(x, factor);
          found |= !IsFiniteStored<D>(out);
          return out;
        }
      });
    });
  });
  BlockRaiseFlag(found, flag);
  if constexpr (kAmax) {
    BlockRaiseAmax(peak, amax);
  }
}

}  // namespace

void LaunchUnscale(const Launch& launch, FactorSource factor, std::int32_t* flag, cudaStream_t stream) {
  UnscaleKernel<false><<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, factor, flag, nullptr);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

void LaunchUnscaleAmax(const Launch& launch, FactorSource factor, std::int32_t* flag, float* amax,
                       cudaStream_t stream) {
  UnscaleKernel<true><<<launch.blocks, kBlockThreads, 0, stream>>>(launch.table, factor, flag, amax);
  MLFW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mlframework::backends::cuda
