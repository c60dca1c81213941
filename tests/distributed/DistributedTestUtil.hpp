#pragma once
// Shared by the distributed suites: the process group under test (MPI when built in, so the
// same executable runs under mpiexec with 2 and 4 ranks, else the local group) and a tiny MLP
// with a hand-written forward and backward, so FSDP runs can be compared with one process.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <mlframework/backends/cpu/CpuTensor.hpp>
#include <mlframework/config.hpp>
#include <mlframework/core/Tensor.hpp>
#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/distributed/LocalProcessGroup.hpp>
#include <mlframework/distributed/MpiProcessGroup.hpp>

namespace mlfw_test {

using mlframework::GradientMap;
using mlframework::TensorPtr;

// A framework's own tensor type (not a CPU-backend tensor, no TensorBackend): every operation
// goes to a CPU tensor, and it reports `device`. Collectives stage it through host memory;
// FSDP cannot allocate next to it when `device` is not the CPU. With `host_memory`, it hands
// out its elements' memory (ITensor::HostBytes()), as a framework's tensor over host memory
// does: collectives then use it in place. Element reads and writes through ToFloatVector() and
// CopyFromFloats() are counted, so a test sees whether a caller staged it.
class UserTensor final : public mlframework::ITensor {
 public:
  explicit UserTensor(TensorPtr inner, mlframework::Device device = mlframework::Device::CPU(),
                      bool host_memory = false)
      : inner_(std::move(inner)), device_(device), host_memory_(host_memory) {}
  mlframework::DataType GetDataType() const override { return inner_->GetDataType(); }
  mlframework::Device GetDevice() const override { return device_; }
  const mlframework::Shape& GetShape() const override { return inner_->GetShape(); }
  std::size_t Size() const override { return inner_->Size(); }
  std::vector<float> ToFloatVector() const override {
    ++element_copies_;
    return inner_->ToFloatVector();
  }
  void CopyFromFloats(std::span<const float> values) override {
    ++element_copies_;
    inner_->CopyFromFloats(values);
  }
  // Calls of ToFloatVector() and CopyFromFloats() so far.
  int ElementCopies() const noexcept { return element_copies_; }
  // The elements without counting a copy (for checks in tests).
  std::vector<float> Peek() const { return inner_->ToFloatVector(); }

 protected:
  std::span<std::byte> HostStorage() const noexcept override {
    return host_memory_ ? inner_->MutableHostBytes() : std::span<std::byte>{};
  }

 private:
  TensorPtr inner_;
  mlframework::Device device_;
  bool host_memory_;
  mutable int element_copies_ = 0;
};

inline std::shared_ptr<mlframework::distributed::IProcessGroup> WorldGroup(
    mlframework::distributed::MpiProcessGroupOptions options = {}) {
  if (mlframework::distributed::MpiAvailable()) return mlframework::distributed::MakeMpiProcessGroup(options);
  return mlframework::distributed::MakeLocalProcessGroup();
}

// max |a - b| / max |b| over two equally long vectors (0 when both are zero).
inline double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0;
  double scale = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  if (a.size() != b.size()) return 1e30;
  return scale == 0.0 ? diff : diff / scale;
}

// MLP: x[in] -> relu(W1 x + b1)[hidden] -> W2 h + b2 [out]; loss = mean squared error.
struct Mlp {
  static constexpr std::size_t kIn = 8;
  static constexpr std::size_t kHidden = 10;  // layer 1 has 90 elements: padded for 4 ranks
  static constexpr std::size_t kOut = 3;      // layer 2 has 33 elements: padded for 2 and 4 ranks
  static constexpr std::size_t kBatch = 8;

  static std::vector<float> Values(std::size_t count, float a, float b, float amplitude) {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = amplitude * std::sin(a * static_cast<float>(i) + b);
    return v;
  }
  static GradientMap Layer1() {
    return {{"weight", mlframework::FromVector(Values(kHidden * kIn, 0.71f, 0.3f, 0.4f), {kHidden, kIn})},
            {"bias", mlframework::FromVector(Values(kHidden, 1.3f, 0.1f, 0.1f), {kHidden})}};
  }
  static GradientMap Layer2() {
    return {{"weight", mlframework::FromVector(Values(kOut * kHidden, 0.53f, 0.9f, 0.4f), {kOut, kHidden})},
            {"bias", mlframework::FromVector(Values(kOut, 2.1f, 0.2f, 0.1f), {kOut})}};
  }
  // Samples [first, first + count) of the global batch.
  struct Batch {
    std::vector<float> x, y;
    std::size_t count = 0;
  };
  static Batch Slice(std::size_t first, std::size_t count, int step) {
    Batch batch;
    batch.count = count;
    for (std::size_t b = first; b < first + count; ++b) {
      for (std::size_t i = 0; i < kIn; ++i) {
        batch.x.push_back(std::sin(0.37f * static_cast<float>(b * kIn + i) + 0.11f * static_cast<float>(step)));
      }
      for (std::size_t o = 0; o < kOut; ++o) {
        batch.y.push_back(std::cos(0.23f * static_cast<float>(b * kOut + o) + 0.05f * static_cast<float>(step)));
      }
    }
    return batch;
  }
  static Batch RankSlice(int rank, int world, int step) {
    const std::size_t per_rank = kBatch / static_cast<std::size_t>(world);
    return Slice(per_rank * static_cast<std::size_t>(rank), per_rank, step);
  }

  struct Output {
    double loss = 0.0;   // unscaled mean loss over the batch
    GradientMap layer1;  // FP32 gradients of loss * scale
    GradientMap layer2;
  };
  // Forward and backward from the (gathered, any dtype) parameter views.
  static Output Run(const GradientMap& l1, const GradientMap& l2, const Batch& batch, float scale = 1.0f) {
    const std::vector<float> w1 = l1.at("weight")->ToFloatVector();
    const std::vector<float> b1 = l1.at("bias")->ToFloatVector();
    const std::vector<float> w2 = l2.at("weight")->ToFloatVector();
    const std::vector<float> b2 = l2.at("bias")->ToFloatVector();
    std::vector<double> gw1(w1.size()), gb1(b1.size()), gw2(w2.size()), gb2(b2.size());
    double loss = 0.0;
    const double norm = 1.0 / static_cast<double>(batch.count * kOut);
    for (std::size_t b = 0; b < batch.count; ++b) {
      const float* x = &batch.x[b * kIn];
      const float* y = &batch.y[b * kOut];
      std::vector<double> h(kHidden);
      for (std::size_t j = 0; j < kHidden; ++j) {
        double acc = b1[j];
        for (std::size_t i = 0; i < kIn; ++i) acc += static_cast<double>(w1[j * kIn + i]) * x[i];
        h[j] = acc > 0.0 ? acc : 0.0;
      }
      std::vector<double> dh(kHidden, 0.0);
      for (std::size_t o = 0; o < kOut; ++o) {
        double pred = b2[o];
        for (std::size_t j = 0; j < kHidden; ++j) pred += static_cast<double>(w2[o * kHidden + j]) * h[j];
        const double err = pred - y[o];
        loss += err * err * norm;
        const double dpred = 2.0 * err * norm * scale;
        gb2[o] += dpred;
        for (std::size_t j = 0; j < kHidden; ++j) {
          gw2[o * kHidden + j] += dpred * h[j];
          dh[j] += dpred * w2[o * kHidden + j];
        }
      }
      for (std::size_t j = 0; j < kHidden; ++j) {
        if (h[j] <= 0.0) continue;
        gb1[j] += dh[j];
        for (std::size_t i = 0; i < kIn; ++i) gw1[j * kIn + i] += dh[j] * x[i];
      }
    }
    auto tensor = [](const std::vector<double>& g, mlframework::Shape shape) {
      return mlframework::FromVector(std::vector<float>(g.begin(), g.end()), std::move(shape));
    };
    Output out;
    out.loss = loss;
    out.layer1 = {{"weight", tensor(gw1, {kHidden, kIn})}, {"bias", tensor(gb1, {kHidden})}};
    out.layer2 = {{"weight", tensor(gw2, {kOut, kHidden})}, {"bias", tensor(gb2, {kOut})}};
    return out;
  }
};

// Values whose sums round differently in another order, different on every rank.
inline std::vector<float> RankValues(std::size_t count, int rank, float salt) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = std::sin(0.37f * static_cast<float>(i) + salt) * (1.0f + 0.3f * static_cast<float>(rank)) +
                1e-3f * static_cast<float>(rank * 7 + 1) / static_cast<float>(i + 1);
  }
  return values;
}

// A 1-D tensor of @p values in @p dtype.
inline mlframework::TensorPtr Make(const std::vector<float>& values, mlframework::DataType dtype) {
  return mlframework::FromVector(values, {values.size()}, dtype);
}

/// Whether @p a and @p b hold the same floats bit for bit (NaNs and signed zeros included).
inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace mlfw_test
