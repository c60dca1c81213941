// A C++ program built with the pre-C++11 standard-library ABI (-D_GLIBCXX_USE_CXX11_ABI=0) and
// C++17, which cannot link the C++ API (its signatures carry std::string and std::map of the new
// ABI) but links and runs a training loop through the C API alone.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <mlframework/c/mlframework.h>

#if _GLIBCXX_USE_CXX11_ABI != 0
#error "build this consumer with -D_GLIBCXX_USE_CXX11_ABI=0"
#endif

namespace {

int Fail(const char* what) {
  std::fprintf(stderr, "%s failed: %s\n", what, mlfw_last_error());
  return 1;
}

DLTensor Vector(std::vector<float>& data, int64_t* shape) {
  DLTensor tensor{};
  tensor.data = data.data();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = DLDataType{kDLFloat, 32, 1};
  tensor.shape = shape;
  return tensor;
}

}  // namespace

int main() {
  const std::string name = "layer.weight";  // an old-ABI std::string, handed over as const char*
  std::vector<float> weights = {1.0f, -2.0f, 3.0f};
  std::vector<float> gradients(weights.size());
  int64_t shape[1] = {static_cast<int64_t>(weights.size())};
  DLTensor weight_tensor = Vector(weights, shape);
  DLTensor gradient_tensor = Vector(gradients, shape);
  const char* names[1] = {name.c_str()};
  const DLTensor* parameters[1] = {&weight_tensor};
  const DLTensor* grads[1] = {&gradient_tensor};

  mlfw_grad_scaler_t scaler = nullptr;
  if (mlfw_grad_scaler_create_static(256.0f, 1, &scaler) != MLFW_STATUS_OK) {
    return Fail("mlfw_grad_scaler_create_static");
  }
  mlfw_sgd_options options;
  mlfw_sgd_options_default(&options);
  options.learning_rate = 0.1;
  options.momentum = 0.5;
  mlfw_optimizer_t sgd = nullptr;
  if (mlfw_sgd_create(names, parameters, 1, &options, &sgd) != MLFW_STATUS_OK) {
    return Fail("mlfw_sgd_create");
  }
  // PyTorch's SGD with momentum, in double, for comparison (lr 0.1, momentum 0.5).
  std::vector<double> reference(weights.begin(), weights.end());
  std::vector<double> buffer(weights.size(), 0.0);
  int stepped_count = 0;
  for (int iteration = 0; iteration < 20; ++iteration) {
    for (std::size_t i = 0; i < reference.size(); ++i) {
      buffer[i] = iteration == 0 ? reference[i] : 0.5 * buffer[i] + reference[i];
      reference[i] -= 0.1 * buffer[i];
    }
    float loss_value = 0.0f;
    for (std::size_t i = 0; i < weights.size(); ++i) {
      loss_value += 0.5f * weights[i] * weights[i];
      gradients[i] = 256.0f * weights[i];  // d(scaled loss)/dw
    }
    int64_t one[1] = {1};
    std::vector<float> loss_data = {loss_value};
    DLTensor loss = Vector(loss_data, one);
    DLManagedTensor* scaled = nullptr;
    if (mlfw_grad_scaler_scale(scaler, &loss, nullptr, &scaled) != MLFW_STATUS_OK) {
      return Fail("mlfw_grad_scaler_scale");
    }
    scaled->deleter(scaled);
    int stepped = 0;
    if (mlfw_optimizer_set_gradients(sgd, names, grads, 1) != MLFW_STATUS_OK ||
        mlfw_grad_scaler_step(scaler, sgd, MLFW_STEP_AND_UPDATE, nullptr, &stepped) != MLFW_STATUS_OK) {
      return Fail("one iteration");
    }
    stepped_count += stepped;
  }
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (!(std::fabs(weights[i] - reference[i]) < 1e-5)) {
      std::fprintf(stderr, "weight %zu is %g, PyTorch's SGD gives %g\n", i, static_cast<double>(weights[i]),
                   reference[i]);
      return 1;
    }
  }
  mlfw_optimizer_destroy(sgd);
  mlfw_grad_scaler_destroy(scaler);
  std::printf("old-abi consumer ok (%d steps, C API %d)\n", stepped_count, mlfw_api_version());
  return stepped_count == 20 ? 0 : 1;
}
