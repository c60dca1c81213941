#pragma once
// Private: the CUDA backend's DeviceScaleState (a DeviceScaleBlock in device memory) and the
// pointer arithmetic to the fields of device-resident structs, shared by CudaBackend.cpp.

#include <cstddef>
#include <cstdint>

#include <mlframework/core/DeviceScaling.hpp>

#include "mlframework/backends/cuda/CudaCheck.hpp"
#include "mlframework/backends/cuda/DeviceContext.hpp"
#include "mlframework/backends/cuda/LaunchPlan.hpp"

namespace mlframework::backends::cuda {

// Device pointers to fields of device-resident structs, computed without dereferencing.
template <typename Field, typename Struct>
inline Field* FieldPointer(Struct* base, std::size_t offset) {
  return reinterpret_cast<Field*>(reinterpret_cast<char*>(base) + offset);
}

// ---- device-resident scaling state ---------------------------------------------------------

class CudaScaleState final : public DeviceScaleState {
 public:
  CudaScaleState(int device, const ScalePolicy& policy, const ScaleState& initial)
      : context_(&DeviceContext::Get(device)), policy_(policy) {
    const StreamUse use(*context_);
    block_ = static_cast<DeviceScaleBlock*>(context_->Allocate(sizeof(DeviceScaleBlock)));
    try {
      WriteLocked(initial);
    } catch (...) {
      context_->Free(block_);
      throw;
    }
  }
  ~CudaScaleState() override { context_->Free(block_); }
  CudaScaleState(const CudaScaleState&) = delete;
  CudaScaleState& operator=(const CudaScaleState&) = delete;

  Device GetDevice() const noexcept override { return Device::CUDA(context_->DeviceIndex()); }
  const ScalePolicy& Policy() const noexcept override { return policy_; }
  ScaleState Read() const override { return ReadBlock().state; }
  void Write(const ScaleState& state) override {
    const StreamUse use(*context_);
    WriteLocked(state);
  }
  bool FoundInf() const override { return ReadBlock().found_inf != 0; }
  void MarkFoundInf() override {
    const StreamUse use(*context_);
    // Byte-wise memset: 0x01010101 is non-zero, which is all the flag means.
    MLFW_CUDA_CHECK(context_->DeviceDriver().MemsetAsync(FlagPointer(), 1, sizeof(std::int32_t), context_->Stream()));
  }
  void ClearFoundInf() override {
    const StreamUse use(*context_);
    MLFW_CUDA_CHECK(context_->DeviceDriver().MemsetAsync(FlagPointer(), 0, sizeof(std::int32_t), context_->Stream()));
  }
  bool LastStepSkipped() const override { return ReadBlock().last_skipped != 0; }
  // Queued kernels (CudaBackend.cpp, beside the launch driver): no wait.
  void FlagToTensor(TensorPtr& out) const override;
  void FlagFromTensor(const ITensor& in) override;
  float Amax() const override { return ReadBlock().amax; }
  void ClearAmax() override {
    const StreamUse use(*context_);
    MLFW_CUDA_CHECK(context_->DeviceDriver().MemsetAsync(AmaxPointer(), 0, sizeof(float), context_->Stream()));
  }

  DeviceContext& Context() const noexcept { return *context_; }
  DeviceScaleBlock* Block() const noexcept { return block_; }
  const float* ScalePointer() const noexcept {
    return FieldPointer<float>(block_, offsetof(DeviceScaleBlock, state) + offsetof(ScaleState, Scale));
  }
  std::int32_t* FlagPointer() const noexcept {
    return FieldPointer<std::int32_t>(block_, offsetof(DeviceScaleBlock, found_inf));
  }
  // The amax the kernels raise while tracking is on, else null (the kernels without it).
  float* AmaxPointer() const noexcept { return FieldPointer<float>(block_, offsetof(DeviceScaleBlock, amax)); }

 private:
  void WriteLocked(const ScaleState& state) {
    const DeviceScaleBlock host{state, 0, 0, 0.0f};
    Driver& driver = context_->DeviceDriver();
    MLFW_CUDA_CHECK(driver.MemcpyAsync(block_, &host, sizeof host, cudaMemcpyHostToDevice, context_->Stream()));
    // `host` lives on this stack frame: wait until the copy has read it.
    MLFW_CUDA_CHECK(driver.StreamSynchronize(context_->Stream()));
  }
  DeviceScaleBlock ReadBlock() const {
    const StreamUse use(*context_);
    DeviceScaleBlock host{};
    Driver& driver = context_->DeviceDriver();
    MLFW_CUDA_CHECK(driver.MemcpyAsync(&host, block_, sizeof host, cudaMemcpyDeviceToHost, context_->Stream()));
    MLFW_CUDA_CHECK(driver.StreamSynchronize(context_->Stream()));
    return host;
  }

  DeviceContext* context_;
  ScalePolicy policy_;
  DeviceScaleBlock* block_ = nullptr;
};

}  // namespace mlframework::backends::cuda
