#include "mlframework/backends/cuda/CudaFloat8Scales.hpp"

#include <string>
#include <typeinfo>

#include <mlframework/core/Error.hpp>

#include "mlframework/backends/cuda/CudaTensorImpl.hpp"
#include "mlframework/backends/cuda/DeviceContext.hpp"
#include "mlframework/backends/cuda/Driver.hpp"
#include "mlframework/backends/cuda/Float8ScaleUpdate.cuh"

namespace mlframework::backends::cuda {

void QueueFloat8StateStep(ITensor& state, const Float8ScaleUpdate& update, bool fold) {
  if (typeid(state) != typeid(CudaTensor)) {
    throw ArgumentError("state", "is not a CUDA-backend tensor (device " + state.GetDevice().ToString() + ")");
  }
  if (state.GetDataType() != DataType::Float32) {
    throw ArgumentError("state", "is " + std::string(ToString(state.GetDataType())) + "; FP8 scale state is Float32");
  }
  ValidateFloat8ScaleUpdate(update, state.Size());
  const auto& tensor = static_cast<const CudaTensor&>(state);
  DeviceContext& context = DeviceContext::Get(tensor.DeviceIndex());
  const StreamUse use(context);
  auto* data = static_cast<float*>(tensor.Data());
  const BufferUse buffer{data, tensor.Bytes(), Use::ReadWrite};
  context.DeviceDriver().Launch(fold ? "FP8 amax fold" : "FP8 scale update", context.Stream(),
                                KernelOperands{{}, Access::Writes, {&buffer, 1}}, [&] {
                                  if (fold) {
                                    LaunchFloat8AmaxFold(data, update, context.Stream());
                                  } else {
                                    LaunchFloat8ScaleUpdate(data, update, context.Stream());
                                  }
                                });
}

}  // namespace mlframework::backends::cuda
