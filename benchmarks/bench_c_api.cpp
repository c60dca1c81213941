// The C API's cost per training iteration against the C++ API's, side by side in one run.
//
// One iteration as a framework runs it on the demo's MLP (784-128-10: gradients 128x784, 128,
// 10x128, 10), FP16 parameters and gradients (the scaler unscales them into FP32, Adam steps
// the FP32 masters): scale the loss, hand the optimizer its gradients, GradScaler step.
// BM_CxxIteration calls amp::GradScaler and optimizers::Adam; BM_CIteration calls
// libmlframework_c over DLTensors of the same memory. Target: C within 10% of C++
// (docs/BENCHMARKS.md).
#include <cstddef>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <dlpack/dlpack.h>

#include <mlframework/c/mlframework.h>
#include <mlframework/mlframework.hpp>

namespace {

using namespace mlframework;

// The demo MLP's parameters or gradients, with small values (no overflow: every step is taken).
GradientMap MlpTensors(float value) {
  GradientMap tensors;
  auto add = [&](const std::string& name, Shape shape) {
    std::vector<float> values(ElementCount(shape), value);
    tensors.emplace(name, FromVector(values, std::move(shape), DataType::Float16));
  };
  add("fc1.weight", {128, 784});
  add("fc1.bias", {128});
  add("fc2.weight", {10, 128});
  add("fc2.bias", {10});
  return tensors;
}

// DLPack views of @p tensors (what a framework's at::toDLPack hands over), in key order.
struct DLViews {
  explicit DLViews(const GradientMap& tensors) {
    for (const auto& [name, tensor] : tensors) {
      names.push_back(name);
      managed.push_back(ToDLPack(tensor));
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      name_pointers.push_back(names[i].c_str());
      pointers.push_back(&managed[i]->dl_tensor);
    }
  }
  ~DLViews() {
    for (DLManagedTensor* m : managed) {
      m->deleter(m);
    }
  }
  DLViews(const DLViews&) = delete;
  DLViews& operator=(const DLViews&) = delete;
  DLViews(DLViews&&) = delete;
  DLViews& operator=(DLViews&&) = delete;
  std::vector<std::string> names;
  std::vector<DLManagedTensor*> managed;
  std::vector<const char*> name_pointers;
  std::vector<const DLTensor*> pointers;
};

void BM_CxxIteration(benchmark::State& state) {
  const GradientMap parameters = MlpTensors(0.5f);
  const GradientMap gradients = MlpTensors(1.0f);
  optimizers::Adam adam(parameters);
  amp::GradScaler scaler;
  const TensorPtr loss = Scalar(0.25f);
  for (auto _ : state) {
    const TensorPtr scaled = scaler.Scale(loss);
    benchmark::DoNotOptimize(scaled.get());
    adam.SetGradients(gradients);
    benchmark::DoNotOptimize(scaler.Step(adam));
  }
}

void Ok(mlfw_status status, benchmark::State& state) {
  if (status != MLFW_STATUS_OK) {
    state.SkipWithError(mlfw_last_error());
  }
}

void BM_CIteration(benchmark::State& state) {
  const GradientMap parameters = MlpTensors(0.5f);
  const GradientMap gradients = MlpTensors(1.0f);
  const DLViews parameter_views(parameters);
  const DLViews gradient_views(gradients);
  const TensorPtr loss_tensor = Scalar(0.25f);
  DLManagedTensor* loss = ToDLPack(loss_tensor);
  mlfw_adam_options options;
  mlfw_adam_options_default(&options);
  mlfw_optimizer_t adam = nullptr;
  Ok(mlfw_adam_create(parameter_views.name_pointers.data(), parameter_views.pointers.data(),
                      parameter_views.pointers.size(), &options, &adam),
     state);
  mlfw_dynamic_scaler_config config;
  mlfw_dynamic_scaler_config_default(&config);
  mlfw_grad_scaler_t scaler = nullptr;
  Ok(mlfw_grad_scaler_create_dynamic(&config, &scaler), state);
  for (auto _ : state) {
    DLManagedTensor* scaled = nullptr;
    Ok(mlfw_grad_scaler_scale(scaler, &loss->dl_tensor, nullptr, &scaled), state);
    benchmark::DoNotOptimize(scaled->dl_tensor.data);
    scaled->deleter(scaled);
    Ok(mlfw_optimizer_set_gradients(adam, gradient_views.name_pointers.data(), gradient_views.pointers.data(),
                                    gradient_views.pointers.size()),
       state);
    int stepped = 0;
    Ok(mlfw_grad_scaler_step(scaler, adam, MLFW_STEP_AND_UPDATE, nullptr, &stepped), state);
    benchmark::DoNotOptimize(stepped);
  }
  mlfw_grad_scaler_destroy(scaler);
  mlfw_optimizer_destroy(adam);
  loss->deleter(loss);
}

}  // namespace

// Five repetitions each; run with --benchmark_enable_random_interleaving=true so both see the same machine state.
BENCHMARK(BM_CxxIteration)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_CIteration)->Repetitions(5)->ReportAggregatesOnly(true);

BENCHMARK_MAIN();
