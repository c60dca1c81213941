/* The conversion layer through the C API: FP16 gradients checked, unscaled, clipped and
 * converted to FP32 (values checked against the arithmetic here), an overflow that skips the
 * step and backs the scale off, an optimizer fed directly, the state bytes, and bad input. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "CApiCheck.h"

int main(void) {
  mlfw_mixed_precision_options options;
  CHECK_OK(mlfw_mixed_precision_options_default(&options));
  CHECK(options.precision == MLFW_PRECISION_FLOAT16 && options.initial_loss_scale == 65536.0f);
  options.initial_loss_scale = 1024.0f;
  options.growth_interval = 2;

  mlfw_conversion_layer_t const sentinel = (mlfw_conversion_layer_t)(void*)&options;
  mlfw_conversion_layer_t layer = sentinel;
  EXPECT_STATUS(mlfw_conversion_layer_create(NULL, &layer), MLFW_STATUS_NULL_ARGUMENT, "'options'");
  options.precision = (mlfw_precision)9;
  EXPECT_STATUS(mlfw_conversion_layer_create(&options, &layer), MLFW_STATUS_INVALID_ARGUMENT,
                "'options->precision': 9");
  options.precision = MLFW_PRECISION_FLOAT16;
  options.growth_factor = 1.0f;
  EXPECT_STATUS(mlfw_conversion_layer_create(&options, &layer), MLFW_STATUS_INVALID_ARGUMENT, "rowth");
  options.growth_factor = 2.0f;
  CHECK(layer == sentinel);
  CHECK_OK(mlfw_conversion_layer_create(&options, &layer));

  /* FP16 gradients of the scaled loss: 512 and -256 (scale 1024), i.e. 0.5 and -0.25 */
  uint16_t half[2] = {0x6000, 0xDC00};
  int64_t shape[1] = {2};
  DLTensor gradient = CApiFloat32Vector((float*)(void*)half, shape);
  gradient.dtype.bits = 16;
  const char* names[1] = {"w"};
  const DLTensor* grads[1] = {&gradient};

  float loss_value = 3.0f;
  int64_t one[1] = {1};
  DLTensor loss = CApiFloat32Vector(&loss_value, one);
  DLManagedTensor* scaled = NULL;
  CHECK_OK(mlfw_conversion_layer_scale_loss(layer, &loss, NULL, &scaled));
  CHECK(((const float*)scaled->dl_tensor.data)[0] == 3072.0f);
  scaled->deleter(scaled);

  float weights[2] = {1.0f, 1.0f};
  DLTensor weight = CApiFloat32Vector(weights, shape);
  const DLTensor* parameters[1] = {&weight};
  mlfw_sgd_options sgd_options;
  CHECK_OK(mlfw_sgd_options_default(&sgd_options));
  sgd_options.learning_rate = 1.0;
  mlfw_optimizer_t sgd = NULL;
  CHECK_OK(mlfw_sgd_create(names, parameters, 1, &sgd_options, &sgd));

  DLManagedTensor* fp32[1] = {NULL};
  int skip = -1;
  CHECK_OK(mlfw_conversion_layer_process(layer, names, grads, 1, NULL, sgd, fp32, &skip));
  CHECK(skip == 0 && fp32[0] != NULL && fp32[0]->dl_tensor.dtype.bits == 32);
  CHECK(((const float*)fp32[0]->dl_tensor.data)[0] == 0.5f && ((const float*)fp32[0]->dl_tensor.data)[1] == -0.25f);
  fp32[0]->deleter(fp32[0]);
  CHECK_OK(mlfw_optimizer_step(sgd, NULL));
  CHECK(weights[0] == 0.5f && weights[1] == 1.25f);

  /* an Inf: skipped, nothing written, the scale backed off */
  half[1] = 0x7C00;
  fp32[0] = NULL;
  CHECK_OK(mlfw_conversion_layer_process(layer, names, grads, 1, NULL, NULL, fp32, &skip));
  CHECK(skip == 1 && fp32[0] == NULL);
  mlfw_conversion_stats stats;
  CHECK_OK(mlfw_conversion_layer_get_stats(layer, &stats));
  CHECK(stats.loss_scale == 512.0f && stats.total_overflows == 1 && stats.clip_count == 0);

  /* state bytes: a second layer takes the first one's state */
  size_t size = 0;
  CHECK_OK(mlfw_conversion_layer_state_dict(layer, NULL, 0, &size));
  unsigned char* blob = malloc(size);
  CHECK(blob != NULL);
  CHECK_OK(mlfw_conversion_layer_state_dict(layer, blob, size, &size));
  mlfw_conversion_layer_t twin = NULL;
  CHECK_OK(mlfw_conversion_layer_create(&options, &twin));
  CHECK_OK(mlfw_conversion_layer_load_state_dict(twin, blob, size));
  mlfw_conversion_stats twin_stats;
  CHECK_OK(mlfw_conversion_layer_get_stats(twin, &twin_stats));
  CHECK(twin_stats.loss_scale == 512.0f && twin_stats.total_overflows == 1);
  EXPECT_STATUS(mlfw_conversion_layer_load_state_dict(twin, blob, size / 2), MLFW_STATUS_INVALID_ARGUMENT, "");
  CHECK_OK(mlfw_conversion_layer_get_stats(twin, &twin_stats));
  CHECK(twin_stats.loss_scale == 512.0f);
  free(blob);
  mlfw_conversion_layer_destroy(twin);

  /* clipping: gradients 512 and 384 at scale 512 are 1 and 0.75 (norm 1.25), clipped to 0.5 */
  mlfw_conversion_layer_t clipper = NULL;
  options.enable_gradient_clipping = 1;
  options.max_grad_norm = 0.5f;
  options.initial_loss_scale = 512.0f;
  CHECK_OK(mlfw_conversion_layer_create(&options, &clipper));
  half[0] = 0x6000;
  half[1] = 0x5E00;
  CHECK_OK(mlfw_conversion_layer_process(clipper, names, grads, 1, NULL, NULL, fp32, &skip));
  CHECK(skip == 0);
  const float* clipped = (const float*)fp32[0]->dl_tensor.data;
  CHECK(fabsf(clipped[0] - 0.4f) < 1e-6f && fabsf(clipped[1] - 0.3f) < 1e-6f);
  fp32[0]->deleter(fp32[0]);
  CHECK_OK(mlfw_conversion_layer_get_stats(clipper, &stats));
  CHECK(stats.clip_count == 1 && fabsf(stats.last_gradient_norm - 1.25f) < 1e-6f);
  mlfw_conversion_layer_destroy(clipper);

  /* bad input: nothing processed */
  CHECK_OK(mlfw_conversion_layer_get_stats(layer, &stats));
  EXPECT_STATUS(mlfw_conversion_layer_process(NULL, names, grads, 1, NULL, NULL, NULL, &skip),
                MLFW_STATUS_NULL_ARGUMENT, "'layer'");
  EXPECT_STATUS(mlfw_conversion_layer_process(layer, names, grads, 1, NULL, NULL, NULL, NULL),
                MLFW_STATUS_NULL_ARGUMENT, "'should_skip'");
  EXPECT_STATUS(mlfw_conversion_layer_process(layer, NULL, grads, 1, NULL, NULL, NULL, &skip),
                MLFW_STATUS_NULL_ARGUMENT, "'names'");
  DLTensor wrong = gradient;
  wrong.dtype.code = kDLInt;
  const DLTensor* wrong_grads[1] = {&wrong};
  EXPECT_STATUS(mlfw_conversion_layer_process(layer, names, wrong_grads, 1, NULL, NULL, NULL, &skip),
                MLFW_STATUS_INVALID_ARGUMENT, "'gradients[0]->dtype'");
  EXPECT_STATUS(mlfw_conversion_layer_process(layer, names, grads, 1, &skip, NULL, NULL, &skip),
                MLFW_STATUS_INVALID_ARGUMENT, "'stream'");
  EXPECT_STATUS(mlfw_conversion_layer_scale_loss(layer, NULL, NULL, &scaled), MLFW_STATUS_NULL_ARGUMENT, "'loss'");
  EXPECT_STATUS(mlfw_conversion_layer_get_stats(layer, NULL), MLFW_STATUS_NULL_ARGUMENT, "'stats'");
  CHECK_OK(mlfw_conversion_layer_get_stats(layer, &twin_stats));
  CHECK(twin_stats.loss_scale == stats.loss_scale && twin_stats.total_overflows == stats.total_overflows &&
        twin_stats.clip_count == stats.clip_count && twin_stats.last_gradient_norm == stats.last_gradient_norm);

  mlfw_optimizer_destroy(sgd);
  mlfw_conversion_layer_destroy(layer);
  printf("c api conversion layer ok\n");
  return 0;
}
