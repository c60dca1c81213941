/* The C API on a CUDA device, ordered on the caller's own stream (the `stream` parameter):
 * every input is written and every result read back with async copies on that stream, so
 * the results are right only when the library's work is ordered after and before them.
 * Exits 77 (CTest's skip) without a device. */
#include <math.h>

#include <cuda_runtime_api.h>

#include "CApiCheck.h"

#define CUDA_OK(call) CHECK((call) == cudaSuccess)

enum { kSize = 4 };

static DLTensor OnDevice(float* data, int64_t* shape) {
  DLTensor tensor = CApiFloat32Vector(data, shape);
  tensor.device.device_type = kDLCUDA;
  tensor.device.device_id = 0;
  return tensor;
}

int main(void) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  CUDA_OK(cudaSetDevice(0));
  cudaStream_t stream = NULL;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int64_t shape[1] = {kSize};
  float* gradients = NULL;
  float* weights = NULL;
  float* loss = NULL;
  CUDA_OK(cudaMalloc((void**)&gradients, kSize * sizeof(float)));
  CUDA_OK(cudaMalloc((void**)&weights, kSize * sizeof(float)));
  CUDA_OK(cudaMalloc((void**)&loss, sizeof(float)));
  DLTensor gradient_tensor = OnDevice(gradients, shape);
  DLTensor weight_tensor = OnDevice(weights, shape);
  int64_t one[1] = {1};
  DLTensor loss_tensor = OnDevice(loss, one);
  const DLTensor* grads[1] = {&gradient_tensor};
  const DLTensor* parameters[1] = {&weight_tensor};
  const char* names[1] = {"w"};

  /* a list operation on the stream */
  const float scaled_values[kSize] = {1024.0f, -2048.0f, 512.0f, 256.0f};
  float host[kSize] = {0};
  CUDA_OK(cudaMemcpyAsync(gradients, scaled_values, sizeof scaled_values, cudaMemcpyHostToDevice, stream));
  int found = -1;
  CHECK_OK(mlfw_unscale_and_check(grads, 1, 1.0f / 1024.0f, stream, &found, NULL));
  CHECK(found == 0);
  CUDA_OK(cudaMemcpyAsync(host, gradients, sizeof host, cudaMemcpyDeviceToHost, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CHECK(host[0] == 1.0f && host[1] == -2.0f && host[2] == 0.5f && host[3] == 0.25f);

  /* the GradScaler iteration on the stream, with an Inf in the second iteration */
  const float initial[kSize] = {1.0f, 1.0f, 1.0f, 1.0f};
  CUDA_OK(cudaMemcpyAsync(weights, initial, sizeof initial, cudaMemcpyHostToDevice, stream));
  mlfw_dynamic_scaler_config config;
  CHECK_OK(mlfw_dynamic_scaler_config_default(&config));
  config.initial_scale = 1024.0f;
  mlfw_grad_scaler_t scaler = NULL;
  CHECK_OK(mlfw_grad_scaler_create_dynamic(&config, &scaler));
  mlfw_sgd_options options;
  CHECK_OK(mlfw_sgd_options_default(&options));
  options.learning_rate = 0.5;
  mlfw_optimizer_t sgd = NULL;
  CHECK_OK(mlfw_sgd_create(names, parameters, 1, &options, &sgd));
  for (int iteration = 0; iteration < 3; ++iteration) {
    float scale = 0.0f;
    CHECK_OK(mlfw_grad_scaler_get_scale(scaler, &scale));
    const float loss_value = 2.0f;
    CUDA_OK(cudaMemcpyAsync(loss, &loss_value, sizeof loss_value, cudaMemcpyHostToDevice, stream));
    DLManagedTensor* scaled = NULL;
    CHECK_OK(mlfw_grad_scaler_scale(scaler, &loss_tensor, stream, &scaled));
    float scaled_loss = 0.0f;
    CUDA_OK(cudaMemcpyAsync(&scaled_loss, scaled->dl_tensor.data, sizeof scaled_loss, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CHECK(scaled_loss == 2.0f * scale);
    scaled->deleter(scaled);
    float grad_values[kSize] = {scale, scale, scale, scale}; /* unscaled: 1 */
    if (iteration == 1) {
      grad_values[2] = INFINITY;
    }
    CUDA_OK(cudaMemcpyAsync(gradients, grad_values, sizeof grad_values, cudaMemcpyHostToDevice, stream));
    CHECK_OK(mlfw_optimizer_set_gradients(sgd, names, grads, 1));
    int stepped = -1;
    CHECK_OK(mlfw_grad_scaler_step(scaler, sgd, MLFW_STEP_AND_UPDATE, stream, &stepped));
    CHECK(stepped == (iteration == 1 ? 0 : 1));
  }
  CUDA_OK(cudaMemcpyAsync(host, weights, sizeof host, cudaMemcpyDeviceToHost, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  /* two steps of 0.5 * 1 taken, one skipped */
  CHECK(host[0] == 0.0f && host[1] == 0.0f && host[2] == 0.0f && host[3] == 0.0f);
  float scale = 0.0f;
  CHECK_OK(mlfw_grad_scaler_get_scale(scaler, &scale));
  CHECK(scale == 512.0f);

  /* a stream with CPU tensors is refused */
  float cpu[kSize] = {0};
  DLTensor cpu_tensor = CApiFloat32Vector(cpu, shape);
  const DLTensor* cpu_list[1] = {&cpu_tensor};
  EXPECT_STATUS(mlfw_has_non_finite(cpu_list, 1, stream, &found), MLFW_STATUS_INVALID_ARGUMENT, "'stream'");

  mlfw_optimizer_destroy(sgd);
  mlfw_grad_scaler_destroy(scaler);
  CUDA_OK(cudaFree(loss));
  CUDA_OK(cudaFree(weights));
  CUDA_OK(cudaFree(gradients));
  CUDA_OK(cudaStreamDestroy(stream));
  printf("c api cuda stream ok\n");
  return 0;
}
