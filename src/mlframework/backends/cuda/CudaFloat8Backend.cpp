#include "mlframework/backends/cuda/CudaFloat8Backend.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <typeinfo>
#include <vector>

#include <mlframework/core/Error.hpp>

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/CudaTensorImpl.hpp"
#include "mlframework/backends/cuda/DeviceContext.hpp"
#include "mlframework/backends/cuda/Driver.hpp"
#include "mlframework/backends/cuda/Float8Cast.cuh"
#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

namespace {

[[noreturn]] void ThrowNotCuda(const ITensor& tensor, const std::string& name) {
  throw ArgumentError(name, "is not a CUDA-backend tensor (device " + tensor.GetDevice().ToString() + ")");
}

const CudaTensor& AsCuda(const ITensor& tensor, const char* name) {
  if (typeid(tensor) != typeid(CudaTensor)) {
    ThrowNotCuda(tensor, name);
  }
  return static_cast<const CudaTensor&>(tensor);
}

// Entry @p i of the list named @p name; the name is built only for the error (a list holds
// thousands of tensors).
const CudaTensor& AsCuda(const ITensor& tensor, const char* name, std::size_t i) {
  if (typeid(tensor) != typeid(CudaTensor)) {
    ThrowNotCuda(tensor, std::string(name) + "[" + std::to_string(i) + "]");
  }
  return static_cast<const CudaTensor&>(tensor);
}

template <typename TensorPointer>
std::vector<ListEntry> Entries(std::span<TensorPointer const> src, std::span<ITensor* const> dst) {
  std::vector<ListEntry> entries;
  entries.reserve(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    const CudaTensor& in = AsCuda(*src[i], "src", i);
    const CudaTensor& out = dst.empty() ? in : AsCuda(*dst[i], "dst", i);
    entries.push_back(ListEntry{in.Data(), out.Data(), in.GetDataType(), out.GetDataType(), in.Size()});
  }
  return entries;
}

// Queues launch_run(launch, index_base, stream) for each run of consecutive non-empty entries
// (the staged table drops empty tensors, so a run's entry s is list entry index_base + s) on
// @p context's stream through the driver, after before(stream). The kernels also touch
// @p buffers. Lists rarely hold empty tensors: one launch.
template <typename Before, typename LaunchRun>
void QueueRuns(DeviceContext& context, const std::vector<ListEntry>& entries, Access access,
               std::initializer_list<BufferUse> buffers, Before&& before, LaunchRun&& launch_run) {
  const StreamUse use(context);
  const cudaStream_t stream = context.Stream();
  before(stream);
  const std::span<const ListEntry> all(entries);
  std::size_t first = 0;
  while (first < entries.size()) {
    if (entries[first].size == 0) {
      ++first;
      continue;
    }
    std::size_t end = first;
    while (end < entries.size() && entries[end].size != 0) {
      ++end;
    }
    const std::span<const ListEntry> run = all.subspan(first, end - first);
    const Launch launch = context.Stage(run, access);
    if (launch.blocks != 0) {
      context.DeviceDriver().Launch("FP8 list", stream, KernelOperands{run, access, buffers},
                                    [&] { launch_run(launch, static_cast<std::uint32_t>(first), stream); });
    }
    first = end;
  }
}

float* FloatsOf(const ITensor& tensor, const char* name) { return static_cast<float*>(AsCuda(tensor, name).Data()); }

}  // namespace

void CudaFloat8Backend::AmaxInto(std::span<const ITensor* const> tensors, ITensor& amax) const {
  float* const out = FloatsOf(amax, "amax");
  const std::vector<ListEntry> entries = Entries(tensors, {});
  DeviceContext& context = DeviceContext::Get(AsCuda(amax, "amax").DeviceIndex());
  QueueRuns(
      context, entries, Access::ReadOnly, {BufferUse{out, entries.size() * sizeof(float), Use::ReadWrite}},
      [&](cudaStream_t stream) {
        MLFW_CUDA_CHECK(context.DeviceDriver().MemsetAsync(out, 0, entries.size() * sizeof(float), stream));
      },
      [&](const Launch& launch, std::uint32_t base, cudaStream_t stream) {
        LaunchFloat8Amax(launch, base, out, stream);
      });
}

void CudaFloat8Backend::ScaledCastToFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                           const ITensor& scale, ITensor* amax) const {
  const float* const factors = FloatsOf(scale, "scale");
  float* const out = amax != nullptr ? FloatsOf(*amax, "amax") : nullptr;
  const std::vector<ListEntry> entries = Entries(src, dst);
  DeviceContext& context = DeviceContext::Get(AsCuda(scale, "scale").DeviceIndex());
  QueueRuns(
      context, entries, Access::Writes,
      {BufferUse{factors, scale.Size() * sizeof(float), Use::Read},
       BufferUse{out, out != nullptr ? entries.size() * sizeof(float) : 0, Use::ReadWrite}},
      [&](cudaStream_t stream) {
        if (out != nullptr) {
          MLFW_CUDA_CHECK(context.DeviceDriver().MemsetAsync(out, 0, entries.size() * sizeof(float), stream));
        }
      },
      [&](const Launch& launch, std::uint32_t base, cudaStream_t stream) {
        LaunchScaledCastToFloat8(launch, base, factors, out, stream);
      });
}

void CudaFloat8Backend::DequantizeFloat8(std::span<const ITensor* const> src, std::span<ITensor* const> dst,
                                         const ITensor& scale_inv) const {
  const float* const factors = FloatsOf(scale_inv, "scale_inv");
  const std::vector<ListEntry> entries = Entries(src, dst);
  QueueRuns(
      DeviceContext::Get(AsCuda(scale_inv, "scale_inv").DeviceIndex()), entries, Access::Writes,
      {BufferUse{factors, scale_inv.Size() * sizeof(float), Use::Read}}, [](cudaStream_t /*stream*/) {},
      [&](const Launch& launch, std::uint32_t base, cudaStream_t stream) {
        LaunchDequantizeFloat8(launch, base, factors, stream);
      });
}

}  // namespace mlframework::backends::cuda
