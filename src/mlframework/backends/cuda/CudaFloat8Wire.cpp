// The CUDA backend's FP8 block wire entry points (TensorBackend::EncodeFloat8Blocks and
// DecodeSumFloat8Blocks): one kernel each (Float8Wire.cuh), queued through the driver on the
// device's stream with the memory it reads and writes, so the recording driver sees them.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

#include <mlframework/core/TensorBackend.hpp>

#include "mlframework/backends/cuda/CudaFloat8Backend.hpp"
#include "mlframework/backends/cuda/CudaTensorImpl.hpp"
#include "mlframework/backends/cuda/DeviceContext.hpp"
#include "mlframework/backends/cuda/Driver.hpp"
#include "mlframework/backends/cuda/Float8Wire.cuh"

namespace mlframework::backends::cuda {

namespace {

// The reductions pass CUDA tensors of this backend only (Float8WireOnDevice()).
const CudaTensor& Cuda(const ITensor& tensor) { return static_cast<const CudaTensor&>(tensor); }

std::size_t BlocksOf(std::size_t length) {
  return (length + Float8BlockRuns::kBlockValues - 1) / Float8BlockRuns::kBlockValues;
}

// Queues @p launch, named @p kernel, on the stream of @p device, touching @p buffers.
template <typename LaunchFn>
void Queue(int device, const char* kernel, std::initializer_list<BufferUse> buffers, LaunchFn&& launch) {
  DeviceContext& context = DeviceContext::Get(device);
  const StreamUse use(context);
  const cudaStream_t stream = context.Stream();
  context.DeviceDriver().Launch(kernel, stream,
                                KernelOperands{{}, Access::ReadOnly, std::span<const BufferUse>(buffers)},
                                [&] { launch(stream); });
}

}  // namespace

void CudaFloat8Backend::EncodeFloat8Blocks(const ITensor& values, const Float8BlockRuns& runs, ITensor& codes,
                                           ITensor& scale_inv) const {
  if (runs.Runs == 0 || runs.Length == 0) {
    return;
  }
  const CudaTensor& source = Cuda(values);
  const float* const x = static_cast<const float*>(source.Data()) + runs.Offset;
  auto* const out = static_cast<std::uint8_t*>(Cuda(codes).Data());
  auto* const scales = static_cast<float*>(Cuda(scale_inv).Data());
  const std::size_t read = ((runs.Runs - 1) * runs.Stride) + runs.Length;  // the runs and what lies between
  Queue(source.DeviceIndex(), "FP8 wire encode",
        {BufferUse{x, read * sizeof(float), Use::Read}, BufferUse{out, runs.Runs * runs.Length, Use::Write},
         BufferUse{scales, runs.Runs * BlocksOf(runs.Length) * sizeof(float), Use::Write}},
        [&](cudaStream_t stream) {
          LaunchFloat8WireEncode(x, runs.Runs, runs.Length, runs.Stride, out, scales, stream);
        });
}

void CudaFloat8Backend::DecodeSumFloat8Blocks(const ITensor& codes, const ITensor& scale_inv, std::size_t parts,
                                              std::size_t length, ITensor& out, std::size_t offset) const {
  if (parts == 0 || length == 0) {
    return;
  }
  const CudaTensor& target = Cuda(out);
  const auto* const c = static_cast<const std::uint8_t*>(Cuda(codes).Data());
  const auto* const scales = static_cast<const float*>(Cuda(scale_inv).Data());
  float* const sums = static_cast<float*>(target.Data()) + offset;
  Queue(
      target.DeviceIndex(), "FP8 wire decode-sum",
      {BufferUse{c, parts * length, Use::Read}, BufferUse{scales, parts * BlocksOf(length) * sizeof(float), Use::Read},
       BufferUse{sums, length * sizeof(float), Use::Write}},
      [&](cudaStream_t stream) { LaunchFloat8WireDecodeSum(c, scales, parts, length, sums, stream); });
}

}  // namespace mlframework::backends::cuda
