/* The scaled loss is a tensor the caller owns, also when no scaling happens: a disabled static
 * scaler, a disabled dynamic one and an FP32 conversion layer hand back a copy of the loss, never
 * a view of the memory the caller lent for the call only (which it may then overwrite or free). */
#include <stdlib.h>

#include "CApiCheck.h"

/* *scaled holds 3.0 in its own memory: the lent loss is overwritten, then freed, before the
 * scaled tensor is read (under ASan a view of it would be a heap use after free). */
static void ExpectOwnCopy(DLManagedTensor* scaled, float* loss_memory) {
  CHECK(scaled != NULL);
  CHECK(scaled->dl_tensor.data != (void*)loss_memory);
  loss_memory[0] = -1.0f;
  free(loss_memory);
  CHECK(((const float*)scaled->dl_tensor.data)[0] == 3.0f);
  scaled->deleter(scaled);
}

static float* NewLoss(void) {
  float* memory = malloc(sizeof(float));
  CHECK(memory != NULL);
  memory[0] = 3.0f;
  return memory;
}

/* mlfw_grad_scaler_scale() of a fresh loss through the disabled @p scaler, which it destroys. */
static void ExpectScalerCopies(mlfw_grad_scaler_t scaler) {
  int64_t shape[1] = {1};
  DLManagedTensor* scaled = NULL;
  float* loss_memory = NewLoss();
  DLTensor loss = CApiFloat32Vector(loss_memory, shape);
  CHECK_OK(mlfw_grad_scaler_scale(scaler, &loss, NULL, &scaled));
  ExpectOwnCopy(scaled, loss_memory);
  mlfw_grad_scaler_destroy(scaler);
}

int main(void) {
  int64_t shape[1] = {1};
  DLManagedTensor* scaled = NULL;

  mlfw_grad_scaler_t disabled_static = NULL;
  CHECK_OK(mlfw_grad_scaler_create_static(8.0f, 0, &disabled_static));
  ExpectScalerCopies(disabled_static);

  mlfw_dynamic_scaler_config config;
  CHECK_OK(mlfw_dynamic_scaler_config_default(&config));
  config.enabled = 0;
  mlfw_grad_scaler_t disabled_dynamic = NULL;
  CHECK_OK(mlfw_grad_scaler_create_dynamic(&config, &disabled_dynamic));
  ExpectScalerCopies(disabled_dynamic);

  mlfw_mixed_precision_options options;
  CHECK_OK(mlfw_mixed_precision_options_default(&options));
  options.precision = MLFW_PRECISION_FLOAT32;
  options.enable_dynamic_loss_scaling = 0;
  mlfw_conversion_layer_t layer = NULL;
  CHECK_OK(mlfw_conversion_layer_create(&options, &layer));
  float* loss_memory = NewLoss();
  DLTensor loss = CApiFloat32Vector(loss_memory, shape);
  CHECK_OK(mlfw_conversion_layer_scale_loss(layer, &loss, NULL, &scaled));
  ExpectOwnCopy(scaled, loss_memory);
  mlfw_conversion_layer_destroy(layer);

  printf("c api scaled loss ok\n");
  return 0;
}
