// libtorch trains a small model; mlframework does its loss scaling on libtorch's own gradients.
//
// Each step the framework (here libtorch) owns the tensors: `zero_grad` leaves fresh `.grad`
// tensors every step, as libtorch's default `set_to_none` does. They reach GradScalerContext
// through DLPack (`at::toDLPack` -> `mlframework::FromDLPack`), with no copy, and the unscaled
// gradients go back to libtorch the same way for its SGD step. FP32 gradients are unscaled in
// libtorch's own memory; FP16/BF16 ones into FP32 buffers of the library.
//
// The run checks itself against the same loop written in plain libtorch (PyTorch's GradScaler
// rules: divide by the scale, skip the step and halve the scale on Inf/NaN): every gradient the
// optimizer receives is bit-identical to `grad.float() / scale`, the step with an injected
// infinity is skipped, and the final weights are bit-identical. Exit 1 on any difference.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <ATen/DLConvertor.h>
#include <torch/torch.h>

#include <mlframework/mlframework.hpp>

using namespace mlframework;

namespace {

constexpr int kSteps = 24;
constexpr int kInfStep = 5;  // an infinity is written into a gradient at this step
constexpr double kLearningRate = 0.05;

// A libtorch tensor as a library tensor over the same memory.
TensorPtr FromTorch(const at::Tensor& tensor) { return FromDLPack(at::toDLPack(tensor)); }
// A library tensor as a libtorch tensor over the same memory.
at::Tensor ToTorch(const TensorPtr& tensor) { return at::fromDLPack(ToDLPack(tensor)); }

// The framework's model: y = x . w + b on parameters of the training dtype, FP32 master weights.
struct Model {
  at::ScalarType dtype;
  std::map<std::string, at::Tensor> master;  // FP32, updated by SGD
  std::map<std::string, at::Tensor> params;  // the training dtype, rebuilt from master each step

  explicit Model(at::ScalarType type) : dtype(type) {
    torch::manual_seed(7);
    master["w"] = torch::randn({16, 1}) * 0.5;
    master["b"] = torch::zeros({1});
  }
  // Forward on a batch; the loss is FP32.
  at::Tensor Loss(const at::Tensor& x, const at::Tensor& y) {
    for (auto& [name, weight] : master) {
      params[name] = weight.to(dtype).detach().requires_grad_(true);
    }
    const at::Tensor pred = (x.to(dtype) * params["w"].t()).sum(1, true) + params["b"];
    return (pred.to(torch::kFloat) - y).pow(2).mean();
  }
  void InjectInf() { params["w"].mutable_grad().index_put_({3, 0}, std::numeric_limits<float>::infinity()); }
};

// What GradScalerContext steps: hands out libtorch's gradients (zero copy), takes the unscaled
// ones back, and runs SGD on the FP32 master weights in libtorch.
class TorchSgd final : public amp::IOptimizer {
 public:
  explicit TorchSgd(Model& model) : model_(model) {}
  // libtorch's gradients of this step, wrapped anew (libtorch made new .grad tensors).
  GradientMap GetGradients() override {
    gradients_.clear();
    for (auto& [name, param] : model_.params) {
      gradients_[name] = FromTorch(param.grad());
    }
    return gradients_;
  }
  // The unscaled FP32 gradients of 16-bit ones (FP32 gradients are unscaled in place and kept).
  void SetGradients(const GradientMap& gradients) override { gradients_ = gradients; }
  void Step() override {
    received.clear();
    for (auto& [name, weight] : model_.master) {
      const at::Tensor gradient = ToTorch(gradients_.at(name));  // FP32, no copy
      received[name] = gradient.clone();
      weight.sub_(gradient, kLearningRate);
    }
  }
  std::map<std::string, at::Tensor> received;  // what the last Step() applied

 private:
  Model& model_;
  GradientMap gradients_;
};

bool BitIdentical(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

// The loop with mlframework's GradScalerContext; returns the final master weights, or an empty
// map after printing the first difference from plain libtorch's arithmetic.
std::map<std::string, at::Tensor> TrainWithLibrary(at::ScalarType dtype, const at::Tensor& x, const at::Tensor& y,
                                                   std::vector<int>& skipped) {
  Model model(dtype);
  TorchSgd optimizer(model);
  amp::GradScaler scaler = amp::GradScalerFactory::CreateForFP16();
  skipped.clear();
  for (int step = 0; step < kSteps; ++step) {
    const at::Tensor loss = model.Loss(x, y);
    const float scale = scaler.CurrentScale();
    amp::GradScalerContext ctx(scaler, FromTorch(loss.detach()));
    // libtorch's autograd seeds the backward pass with loss * scale, as PyTorch's GradScaler does.
    const at::Tensor scaled = loss * scale;
    if (ctx.ScaledLoss()->ToFloatVector()[0] != scaled.item<float>()) {
      std::printf("step %d: ScaledLoss %g differs from libtorch's loss * scale %g\n", step,
                  ctx.ScaledLoss()->ToFloatVector()[0], scaled.item<float>());
      return {};
    }
    scaled.backward();
    if (step == kInfStep) {
      model.InjectInf();
    }
    // Expected: grad.float() / scale, taken before the library unscales FP32 gradients in place.
    std::map<std::string, at::Tensor> expected;
    for (auto& [name, param] : model.params) {
      expected[name] = param.grad().to(torch::kFloat) / scale;
    }
    optimizer.received.clear();
    if (!ctx.Step(optimizer)) {
      skipped.push_back(step);  // the injected infinity, or FP16 gradients past 65504 at this scale
      if (!optimizer.received.empty()) {
        std::printf("step %d: skipped, yet the optimizer stepped\n", step);
        return {};
      }
      continue;
    }
    for (auto& [name, gradient] : expected) {
      if (!BitIdentical(optimizer.received.at(name), gradient)) {
        std::printf("step %d: the optimizer's %s differs from grad.float() / scale\n", step, name.c_str());
        return {};
      }
    }
  }
  return model.master;
}

// The same loop in plain libtorch: PyTorch's GradScaler rules written out.
std::map<std::string, at::Tensor> TrainWithLibtorch(at::ScalarType dtype, const at::Tensor& x, const at::Tensor& y,
                                                    std::vector<int>& skipped) {
  Model model(dtype);
  double scale = 65536.0;
  skipped.clear();
  for (int step = 0; step < kSteps; ++step) {
    (model.Loss(x, y) * scale).backward();
    if (step == kInfStep) {
      model.InjectInf();
    }
    std::map<std::string, at::Tensor> unscaled;
    bool finite = true;
    for (auto& [name, param] : model.params) {
      unscaled[name] = param.grad().to(torch::kFloat) / scale;
      finite = finite && unscaled[name].isfinite().all().item<bool>();
    }
    if (!finite) {
      scale *= 0.5;
      skipped.push_back(step);
      continue;
    }
    for (auto& [name, weight] : model.master) {
      weight.sub_(unscaled[name], kLearningRate);
    }
  }
  return model.master;
}

}  // namespace

int Run() {
  torch::manual_seed(1);
  const at::Tensor x = torch::randn({64, 16});
  const at::Tensor y = x.matmul(torch::linspace(-1.0, 1.0, 16).unsqueeze(1)) + 0.25;
  bool ok = true;
  for (const at::ScalarType dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
    std::vector<int> skipped_library;
    std::vector<int> skipped_torch;
    const auto library = TrainWithLibrary(dtype, x, y, skipped_library);
    const auto reference = TrainWithLibtorch(dtype, x, y, skipped_torch);
    bool same = !library.empty() && skipped_library == skipped_torch &&
                std::find(skipped_library.begin(), skipped_library.end(), kInfStep) != skipped_library.end();
    for (const auto& [name, weight] : reference) {
      same = same && library.count(name) == 1 && BitIdentical(library.at(name), weight);
    }
    std::string steps;
    for (const int step : skipped_library) {
      if (!steps.empty()) {
        steps += ',';
      }
      steps += std::to_string(step);
    }
    std::printf("%-9s %d steps, skipped [%s] (Inf injected at %d), gradients and weights %s plain libtorch's\n",
                c10::toString(dtype), kSteps, steps.c_str(), kInfStep, same ? "bit-identical to" : "DIFFER from");
    ok = ok && same;
  }
  if (!ok) {
    return 1;
  }
  std::printf("libtorch interop ok\n");
  return 0;
}

int main() {
  try {
    return Run();
  } catch (const std::exception& error) {  // a library or libtorch error: report it, fail the run
    std::printf("libtorch_interop: %s\n", error.what());
    return 1;
  }
}
