/* The FP8 functions of fp8.h: scaled casts into FP8 bytes and back, the delayed and current
 * scaling recipes, their state bytes, and their argument checks. Expected bytes are the FP8
 * encodings (E4M3: bias 7, E5M2: bias 15). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "CApiCheck.h"

/* A one-dimensional uint8 CPU tensor over data[0..n): the bytes of FP8 values. */
static DLTensor Bytes(uint8_t* data, int64_t* shape) {
  DLTensor tensor = CApiFloat32Vector((float*)(void*)data, shape);
  tensor.dtype.code = kDLUInt;
  tensor.dtype.bits = 8;
  return tensor;
}

static int Near(float a, float b) { return fabsf(a - b) <= 1e-6f * fabsf(b); }

int main(void) {
  float values[4] = {1.0f, 2.0f, -0.5f, 1000.0f};
  int64_t shape[1] = {4};
  int64_t one[1] = {1};
  DLTensor tvalues = CApiFloat32Vector(values, shape);
  const DLTensor* src[1] = {&tvalues};

  /* scaled cast at scale 1: exact encodings, 1000 saturates to E4M3's 448; the amax is taken */
  uint8_t e4m3[4] = {0, 0, 0, 0};
  DLTensor te4m3 = Bytes(e4m3, shape);
  const DLTensor* dst[1] = {&te4m3};
  float scale = 1.0f;
  float amax = 0.0f;
  DLTensor tscale = CApiFloat32Vector(&scale, one);
  DLTensor tamax = CApiFloat32Vector(&amax, one);
  CHECK_OK(mlfw_fp8_scaled_cast(src, dst, 1, MLFW_FP8_E4M3, &tscale, &tamax, NULL));
  CHECK(e4m3[0] == 0x38 && e4m3[1] == 0x40 && e4m3[2] == 0xB0 && e4m3[3] == 0x7E);
  CHECK(amax == 1000.0f);
  uint8_t e5m2[4] = {0, 0, 0, 0};
  DLTensor te5m2 = Bytes(e5m2, shape);
  const DLTensor* dst52[1] = {&te5m2};
  CHECK_OK(mlfw_fp8_scaled_cast(src, dst52, 1, MLFW_FP8_E5M2, &tscale, NULL, NULL));
  CHECK(e5m2[0] == 0x3C && e5m2[1] == 0x40 && e5m2[2] == 0xB8);
  float amax_only = 0.0f;
  DLTensor tamax_only = CApiFloat32Vector(&amax_only, one);
  CHECK_OK(mlfw_fp8_amax(src, 1, &tamax_only, NULL));
  CHECK(amax_only == 1000.0f);

  /* dequantize with an inverse scale of 2 */
  float decoded[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float scale_inv = 2.0f;
  DLTensor tdecoded = CApiFloat32Vector(decoded, shape);
  DLTensor tscale_inv = CApiFloat32Vector(&scale_inv, one);
  const DLTensor* fp8_src[1] = {&te4m3};
  const DLTensor* out[1] = {&tdecoded};
  CHECK_OK(mlfw_fp8_dequantize(fp8_src, MLFW_FP8_E4M3, out, 1, &tscale_inv, NULL));
  CHECK(decoded[0] == 2.0f && decoded[1] == 4.0f && decoded[2] == -1.0f && decoded[3] == 896.0f);

  /* bad input: the bytes' dtype, the format, nulls; nothing written */
  const DLTensor* float_dst[1] = {&tvalues};
  EXPECT_STATUS(mlfw_fp8_scaled_cast(src, float_dst, 1, MLFW_FP8_E4M3, &tscale, NULL, NULL),
                MLFW_STATUS_INVALID_ARGUMENT, "dst[0]->dtype");
  CHECK(values[0] == 1.0f);
  int bad_format = 7;
  mlfw_fp8_format format;
  memcpy(&format, &bad_format, sizeof format);
  e4m3[0] = 0;
  EXPECT_STATUS(mlfw_fp8_scaled_cast(src, dst, 1, format, &tscale, NULL, NULL), MLFW_STATUS_INVALID_ARGUMENT,
                "'format'");
  CHECK(e4m3[0] == 0);
  EXPECT_STATUS(mlfw_fp8_scaled_cast(src, dst, 1, MLFW_FP8_E4M3, NULL, NULL, NULL), MLFW_STATUS_NULL_ARGUMENT,
                "scale");
  EXPECT_STATUS(mlfw_fp8_dequantize(NULL, MLFW_FP8_E4M3, out, 1, &tscale_inv, NULL), MLFW_STATUS_NULL_ARGUMENT, "src");

  /* delayed scaling, HYBRID: E4M3 for the forward tensor, E5M2 for the gradient */
  mlfw_delayed_scaling_config config;
  CHECK_OK(mlfw_delayed_scaling_config_default(&config));
  CHECK(config.margin == 0 && config.fp8_format == MLFW_FP8_RECIPE_HYBRID && config.amax_history_len == 1024 &&
        config.amax_compute_algo == MLFW_AMAX_MAX);
  mlfw_fp8_recipe_t delayed = NULL;
  CHECK_OK(mlfw_delayed_scaling_create(&config, &delayed));
  CHECK_OK(mlfw_fp8_recipe_register(delayed, "w", MLFW_FP8_FORWARD, &tvalues));
  CHECK_OK(mlfw_fp8_recipe_register(delayed, "g", MLFW_FP8_GRADIENT, &tvalues));
  mlfw_fp8_format w_format = MLFW_FP8_E5M2;
  mlfw_fp8_format g_format = MLFW_FP8_E4M3;
  CHECK_OK(mlfw_fp8_recipe_format_of(delayed, "w", &w_format));
  CHECK_OK(mlfw_fp8_recipe_format_of(delayed, "g", &g_format));
  CHECK(w_format == MLFW_FP8_E4M3 && g_format == MLFW_FP8_E5M2);

  values[3] = 0.25f; /* amax 2 */
  const char* names[1] = {"w"};
  CHECK_OK(mlfw_fp8_recipe_quantize(delayed, names, src, dst, 1, NULL));
  CHECK(e4m3[0] == 0x38 && e4m3[1] == 0x40); /* the first step casts at scale 1 */
  float s = 0.0f;
  float s_inv = 0.0f;
  float a = 0.0f;
  CHECK_OK(mlfw_fp8_recipe_scale(delayed, "w", &s, &s_inv, &a));
  CHECK(s == 1.0f && s_inv == 1.0f && a == 2.0f);
  CHECK_OK(mlfw_fp8_recipe_update_scales(delayed, NULL));
  CHECK_OK(mlfw_fp8_recipe_scale(delayed, "w", &s, &s_inv, NULL));
  CHECK(s == 224.0f && Near(s_inv, 1.0f / 224.0f)); /* E4M3's 448 over the amax 2 */

  /* state bytes: saved, the recipe moved on, restored; an altered blob is refused, state kept */
  size_t size = 0;
  CHECK_OK(mlfw_fp8_recipe_state_dict(delayed, NULL, 0, &size));
  unsigned char* saved = malloc(size);
  CHECK(saved != NULL);
  CHECK_OK(mlfw_fp8_recipe_state_dict(delayed, saved, size, &size));
  values[1] = 8.0f;
  CHECK_OK(mlfw_fp8_recipe_quantize(delayed, names, src, dst, 1, NULL));
  CHECK_OK(mlfw_fp8_recipe_update_scales(delayed, NULL));
  CHECK_OK(mlfw_fp8_recipe_scale(delayed, "w", &s, NULL, NULL));
  CHECK(s == 56.0f);
  CHECK_OK(mlfw_fp8_recipe_load_state_dict(delayed, saved, size));
  CHECK_OK(mlfw_fp8_recipe_scale(delayed, "w", &s, NULL, NULL));
  CHECK(s == 224.0f);
  saved[size / 2] ^= 0x40;
  CHECK(mlfw_fp8_recipe_load_state_dict(delayed, saved, size) != MLFW_STATUS_OK);
  CHECK_OK(mlfw_fp8_recipe_scale(delayed, "w", &s, NULL, NULL));
  CHECK(s == 224.0f);
  free(saved);

  /* an unregistered name, a null name list, a role outside the enum */
  const char* unknown[1] = {"nope"};
  e4m3[0] = 0;
  CHECK(mlfw_fp8_recipe_quantize(delayed, unknown, src, dst, 1, NULL) != MLFW_STATUS_OK);
  CHECK(strstr(mlfw_last_error(), "nope") != NULL && e4m3[0] == 0);
  EXPECT_STATUS(mlfw_fp8_recipe_quantize(delayed, NULL, src, dst, 1, NULL), MLFW_STATUS_NULL_ARGUMENT, "names");
  int bad_role = 9;
  mlfw_fp8_tensor_role role;
  memcpy(&role, &bad_role, sizeof role);
  EXPECT_STATUS(mlfw_fp8_recipe_register(delayed, "x", role, &tvalues), MLFW_STATUS_INVALID_ARGUMENT, "'role'");
  EXPECT_STATUS(mlfw_fp8_recipe_scale(delayed, "x", &s, NULL, NULL), MLFW_STATUS_INVALID_ARGUMENT, "x");
  mlfw_fp8_recipe_destroy(delayed);

  /* current scaling: each cast takes its own amax, so the values come back through the bytes */
  mlfw_fp8_recipe_t current = NULL;
  CHECK_OK(mlfw_current_scaling_create(MLFW_FP8_RECIPE_E4M3, &current));
  CHECK_OK(mlfw_fp8_recipe_register(current, "w", MLFW_FP8_FORWARD, &tvalues));
  values[0] = 1.0f;
  values[1] = 2.0f;
  values[2] = -0.5f;
  values[3] = 0.25f;
  CHECK_OK(mlfw_fp8_recipe_quantize(current, names, src, dst, 1, NULL));
  CHECK_OK(mlfw_fp8_recipe_scale(current, "w", &s, &s_inv, NULL));
  CHECK(s == 224.0f);
  CHECK(e4m3[1] == 0x7E); /* 2 x 224 = 448, E4M3's largest */
  const DLTensor* fp8_w[1] = {&te4m3};
  CHECK_OK(mlfw_fp8_recipe_dequantize(current, names, fp8_w, out, 1, NULL));
  for (int i = 0; i < 4; ++i) {
    CHECK(Near(decoded[i], values[i]));
  }
  mlfw_fp8_recipe_destroy(current);
  mlfw_fp8_recipe_destroy(NULL);
  printf("c api fp8 ok\n");
  return 0;
}
