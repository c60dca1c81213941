#pragma once
// Test-only stand-in for a GPU backend: a DeviceScalingBackend over host memory.
//
// FakeDeviceTensor wraps a CPU tensor and reports a CUDA device, so the
// front-ends take their device path; the math is delegated to the CPU kernels
// through the public API, so results are bit-equal to the host path. The
// backend COUNTS every host synchronisation a real device would need: a value
// read back (Read(), FoundInf(), LastStepSkipped(), the bool/double results of
// the TensorBackend kernels, element reads of a tensor) and every blocking
// host-to-device write (CreateScaleState(), Write()). Tests measure a window
// with SyncCount() to prove which front-end calls are synchronisation-free.
// It also allocates, views, copies without a flag (CopyInto) and accumulates (AddInto) like a
// device backend, none of which waits for the device, so FSDP's device path runs on it.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <mlframework/mlframework.hpp>

namespace mlfw_test {

class FakeDeviceBackend;
const FakeDeviceBackend& FakeBackend();

// A tensor "on the device": a CPU tensor inside, a CUDA device outside.
class FakeDeviceTensor final : public mlframework::ITensor {
 public:
  FakeDeviceTensor(mlframework::TensorPtr inner, int device) : inner_(std::move(inner)), device_(device) {}
  // A view: @p inner is a CPU view of @p base's inner tensor; @p base stays alive with it, so
  // (as for CPU and CUDA views) the base's use count tells whether a view is still out.
  FakeDeviceTensor(mlframework::TensorPtr inner, int device, mlframework::TensorPtr base)
      : inner_(std::move(inner)), device_(device), base_(std::move(base)) {}
  mlframework::DataType GetDataType() const override { return inner_->GetDataType(); }
  mlframework::Device GetDevice() const override { return mlframework::Device::CUDA(device_); }
  const mlframework::Shape& GetShape() const override { return inner_->GetShape(); }
  std::size_t Size() const override { return inner_->Size(); }
  std::vector<float> ToFloatVector() const override;
  void CopyFromFloats(std::span<const float> values) override { inner_->CopyFromFloats(values); }
  const mlframework::TensorBackend* Backend() const noexcept override;

  const mlframework::TensorPtr& Inner() const { return inner_; }
  // The elements without counting a synchronisation (for comparisons in tests).
  std::vector<float> Peek() const { return inner_->ToFloatVector(); }

 private:
  mlframework::TensorPtr Wrap(mlframework::TensorPtr inner) const {
    return std::make_shared<FakeDeviceTensor>(std::move(inner), device_);
  }
  mlframework::TensorPtr inner_;
  int device_;
  mlframework::TensorPtr base_;
};

// A fake tensor on fake device @p device holding @p values.
inline mlframework::TensorPtr FakeTensor(const std::vector<float>& values, mlframework::Shape shape,
                                         mlframework::DataType dtype, int device = 0) {
  return std::make_shared<FakeDeviceTensor>(mlframework::FromVector(values, std::move(shape), dtype), device);
}

inline std::vector<float> Peek(const mlframework::TensorPtr& tensor) {
  if (const auto* fake = dynamic_cast<const FakeDeviceTensor*>(tensor.get())) {
    return fake->Peek();
  }
  return tensor->ToFloatVector();
}

class FakeScaleState final : public mlframework::DeviceScaleState {
 public:
  FakeScaleState(const FakeDeviceBackend& backend, mlframework::Device device,
                 const mlframework::amp::ScalePolicy& policy, const mlframework::amp::ScaleState& initial)
      : backend_(backend), device_(device), policy_(policy), state_(initial) {}
  mlframework::Device GetDevice() const noexcept override { return device_; }
  const mlframework::amp::ScalePolicy& Policy() const noexcept override { return policy_; }
  mlframework::amp::ScaleState Read() const override;
  void Write(const mlframework::amp::ScaleState& state) override;
  bool FoundInf() const override;
  void MarkFoundInf() override { found_inf_ = true; }
  void ClearFoundInf() override { found_inf_ = false; }
  bool LastStepSkipped() const override;
  void FlagToTensor(mlframework::TensorPtr& out) const override;
  void FlagFromTensor(const mlframework::ITensor& in) override;
  float Amax() const override;
  void ClearAmax() override { amax_ = 0.0f; }

  // "Device-side" access used by the fake kernels (no synchronisation).
  mlframework::amp::ScaleState& DeviceSide() { return state_; }
  bool& Flag() { return found_inf_; }
  float& AmaxSide() { return amax_; }
  // Folds a fused pass's result into the flag and, while tracked, the amax.
  void Fold(const mlframework::NonFiniteAndAmax& result) {
    found_inf_ = found_inf_ || result.FoundNonFinite;
    amax_ = std::max(amax_, result.Amax);
  }
  bool& Skipped() { return last_skipped_; }

 private:
  const FakeDeviceBackend& backend_;
  mlframework::Device device_;
  mlframework::amp::ScalePolicy policy_;
  mlframework::amp::ScaleState state_;
  bool found_inf_ = false;
  bool last_skipped_ = false;
  float amax_ = 0.0f;
};

class FakeDeviceBackend final : public mlframework::DeviceScalingBackend {
 public:
  std::string_view Name() const noexcept override { return "fake-device"; }
  // Host synchronisations since the process started (tests take differences).
  std::int64_t SyncCount() const { return syncs_; }
  void CountSync() const { ++syncs_; }

  // Like the CUDA backend: grouped lists only; a pass that asks for the flag or the amax reads
  // the answer back, the others are queued work (no synchronisation). The CPU backend's own write
  // pass, like the CUDA kernels, needs equal sizes, not equal shapes.
  std::optional<mlframework::WritePassResult> Write(mlframework::TensorListView src, mlframework::TensorListView dst,
                                                    const mlframework::WritePassOptions& options) const override {
    if (!src.Grouped) {
      return std::nullopt;
    }
    if (options.State != nullptr) {
      WriteWithState(src.Tensors, dst.Tensors, options);  // on the "device": no synchronisation
      return mlframework::WritePassResult{};
    }
    if (options.Check || options.Amax) {
      CountSync();
    }
    const auto in = Inner(src.Tensors);
    const auto out = Inner(dst.Tensors);
    return mlframework::backends::cpu::Backend().Write({in, true}, {out, true}, options);
  }
  // Like the CUDA backend: grouped lists only, the answer read back.
  std::optional<mlframework::ReadPassResult> Read(mlframework::TensorListView tensors,
                                                  const mlframework::ReadPassOptions& options) const override {
    if (!tensors.Grouped) {
      return std::nullopt;
    }
    if (options.State != nullptr) {
      FakeScaleState& s = Own(*options.State, tensors.Tensors);
      s.Flag() = s.Flag() || mlframework::HasNonFinite(Inner(tensors.Tensors));
      return mlframework::ReadPassResult{};
    }
    CountSync();
    const auto inner = Inner(tensors.Tensors);
    if (options.Amax) {
      const mlframework::NonFiniteAndAmax result = mlframework::CheckAndAmax(inner);
      return mlframework::ReadPassResult{.FoundNonFinite = result.FoundNonFinite, .Amax = result.Amax};
    }
    if (options.SumOfSquares) {
      const mlframework::NonFiniteAndNorm result = mlframework::CheckAndSumSquares(inner, options.Factor);
      return mlframework::ReadPassResult{.FoundNonFinite = result.FoundNonFinite, .SumOfSquares = result.SumOfSquares};
    }
    return mlframework::ReadPassResult{.FoundNonFinite = mlframework::HasNonFinite(inner)};
  }
  // Like the CUDA backend's scan: the results are read back (one wait for the list here).
  void ScanNonFinite(std::span<const mlframework::ITensor* const> tensors,
                     std::span<mlframework::NonFiniteScan> out) const override {
    CountSync();
    ++scans_;
    const std::vector<mlframework::NonFiniteScan> scans = mlframework::ScanNonFinite(Inner(tensors));
    std::copy(scans.begin(), scans.end(), out.begin());
  }
  // ScanNonFinite() calls since the process started (reports are built on overflow steps only).
  std::int64_t ScanCount() const { return scans_; }
  mlframework::TensorPtr Allocate(const mlframework::Shape& shape, mlframework::DataType dtype,
                                  mlframework::Device device) const override {
    if (!device.IsCUDA()) {
      throw mlframework::ArgumentError("device", "the fake device backend allocates on cuda devices only");
    }
    ++allocations_;
    return std::make_shared<FakeDeviceTensor>(mlframework::backends::cpu::Empty(shape, dtype), device.Index);
  }
  mlframework::TensorPtr View(const mlframework::TensorPtr& base, std::size_t offset,
                              const mlframework::Shape& shape) const override {
    if (!base) {
      throw mlframework::ArgumentNullError("base");
    }
    const auto* fake = dynamic_cast<const FakeDeviceTensor*>(base.get());
    if (fake == nullptr) {
      throw mlframework::ArgumentError("base", "is not a fake-device tensor");
    }
    return std::make_shared<FakeDeviceTensor>(mlframework::backends::cpu::View(fake->Inner(), offset, shape),
                                              fake->GetDevice().Index, base);
  }
  // Tensors allocated through Allocate() since the process started.
  std::int64_t AllocationCount() const { return allocations_; }

  std::unique_ptr<mlframework::DeviceScaleState> CreateScaleState(
      mlframework::Device device, const mlframework::amp::ScalePolicy& policy,
      const mlframework::amp::ScaleState& initial) const override {
    CountSync();  // the CUDA backend waits for the copy of the initial state
    return std::make_unique<FakeScaleState>(*this, device, policy, initial);
  }
  void UpdateScale(mlframework::DeviceScaleState& state) const override {
    FakeScaleState& s = Own(state, std::span<const mlframework::ITensor* const>{});
    s.Skipped() = mlframework::amp::UpdateScaleState(s.DeviceSide(), s.Policy(), s.Flag());
    s.Flag() = false;
  }

 private:
  // The CUDA backend's pass with a state: the factor from the state, an unscale's flag and amax into it.
  static void WriteWithState(std::span<const mlframework::TensorPtr> src, std::span<const mlframework::TensorPtr> dst,
                             const mlframework::WritePassOptions& options) {
    FakeScaleState& s = Own(*options.State, src);
    Own(*options.State, dst);
    const bool unscale = options.FactorOfState == mlframework::StateFactor::InverseScale;
    const float scale = s.DeviceSide().Scale;
    const mlframework::WritePassOptions plain{.Op = options.Op,
                                              .Factor = unscale ? mlframework::InverseScale(scale) : scale,
                                              .Check = unscale,
                                              .Amax = unscale && s.AmaxTracking()};
    const mlframework::WritePassResult result = mlframework::WritePass(Inner(src), Inner(dst), plain);
    if (unscale) {
      s.Fold({.FoundNonFinite = result.FoundNonFinite, .Amax = result.Amax});
    }
  }
  // The CPU tensors inside (ArgumentError for a tensor of another backend, as the CUDA backend does).
  template <typename Pointer>
  static std::vector<mlframework::TensorPtr> Inner(std::span<Pointer const> tensors) {
    std::vector<mlframework::TensorPtr> inner;
    inner.reserve(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const auto* fake = dynamic_cast<const FakeDeviceTensor*>(std::to_address(tensors[i]));
      if (fake == nullptr) {
        throw mlframework::ArgumentError("tensors[" + std::to_string(i) + "]", "is not a fake-device tensor");
      }
      inner.push_back(fake->Inner());
    }
    return inner;
  }
  // The fake state, checking that every tensor lives on its device (the CUDA backend's contract).
  template <typename Pointer>
  static FakeScaleState& Own(mlframework::DeviceScaleState& state, std::span<Pointer const> tensors) {
    auto* fake = dynamic_cast<FakeScaleState*>(&state);
    if (fake == nullptr) {
      throw mlframework::ArgumentError("state", "is not a fake-device state");
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i]->GetDevice() != fake->GetDevice()) {
        throw mlframework::ArgumentError("tensors[" + std::to_string(i) + "]", "is not on the state's device");
      }
    }
    return *fake;
  }

  mutable std::int64_t syncs_ = 0;
  mutable std::int64_t scans_ = 0;
  mutable std::int64_t allocations_ = 0;
};

inline const FakeDeviceBackend& FakeBackend() {
  static const FakeDeviceBackend kBackend;
  return kBackend;
}

inline std::vector<float> FakeDeviceTensor::ToFloatVector() const {
  FakeBackend().CountSync();
  return inner_->ToFloatVector();
}
inline const mlframework::TensorBackend* FakeDeviceTensor::Backend() const noexcept { return &FakeBackend(); }

// A reproducible overflow pattern for scale trajectories: each step overflows with
// probability 0.3.
inline std::vector<bool> RandomOverflows(unsigned seed, int steps) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution overflow(0.3);
  std::vector<bool> pattern;
  pattern.reserve(static_cast<std::size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    pattern.push_back(overflow(rng));
  }
  return pattern;
}

// Host synchronisations the fake backend counted while `body` ran.
template <typename Body>
std::int64_t SyncsDuring(Body&& body) {
  const std::int64_t before = FakeBackend().SyncCount();
  body();
  return FakeBackend().SyncCount() - before;
}

inline mlframework::amp::ScaleState FakeScaleState::Read() const {
  backend_.CountSync();
  return state_;
}
inline void FakeScaleState::Write(const mlframework::amp::ScaleState& state) {
  backend_.CountSync();
  state_ = state;
  found_inf_ = false;
  amax_ = 0.0f;
}
inline float FakeScaleState::Amax() const {
  backend_.CountSync();
  return amax_;
}
inline bool FakeScaleState::FoundInf() const {
  backend_.CountSync();
  return found_inf_;
}
inline void FakeScaleState::FlagToTensor(mlframework::TensorPtr& out) const {
  const std::size_t count = AmaxTracking() ? 2 : 1;
  const auto* current = dynamic_cast<const FakeDeviceTensor*>(out.get());
  if (current == nullptr || current->GetDataType() != mlframework::DataType::Float32 || current->Size() != count ||
      current->GetDevice() != device_) {
    out = std::make_shared<FakeDeviceTensor>(mlframework::Zeros({count}), device_.Index);
    current = static_cast<const FakeDeviceTensor*>(out.get());
  }
  const float values[] = {found_inf_ ? 1.0f : 0.0f, amax_};
  current->Inner()->CopyFromFloats(std::span<const float>(values, count));  // a device-side write
}
inline void FakeScaleState::FlagFromTensor(const mlframework::ITensor& in) {
  const std::size_t count = AmaxTracking() ? 2 : 1;
  const auto* fake = dynamic_cast<const FakeDeviceTensor*>(&in);
  if (fake == nullptr || in.GetDataType() != mlframework::DataType::Float32 || in.Size() != count ||
      in.GetDevice() != device_) {
    throw mlframework::ArgumentError("in", "must be an FP32 fake tensor of the flag's size on the state's device");
  }
  const std::vector<float> values = fake->Peek();  // a device-side read
  found_inf_ = values[0] != 0.0f;
  if (count == 2) {
    amax_ = values[1];
  }
}
inline bool FakeScaleState::LastStepSkipped() const {
  backend_.CountSync();
  return last_skipped_;
}

}  // namespace mlfw_test
