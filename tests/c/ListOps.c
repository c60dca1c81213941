/* The list operations of multi_tensor.h over DLTensor arrays, checked against the same
 * arithmetic in C, and their argument checks. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "CApiCheck.h"

int main(void) {
  float a[3] = {2.0f, -4.0f, 6.0f};
  float b[2] = {8.0f, -1.0f};
  int64_t shape_a[1] = {3};
  int64_t shape_b[1] = {2};
  DLTensor ta = CApiFloat32Vector(a, shape_a);
  DLTensor tb = CApiFloat32Vector(b, shape_b);
  const DLTensor* list[2] = {&ta, &tb};

  /* unscale and check, with the amax */
  int found = -1;
  float amax = -1.0f;
  CHECK_OK(mlfw_unscale_and_check(list, 2, 0.5f, NULL, &found, &amax));
  CHECK(found == 0 && amax == 4.0f);
  CHECK(a[0] == 1.0f && a[1] == -2.0f && a[2] == 3.0f && b[0] == 4.0f && b[1] == -0.5f);
  b[1] = INFINITY;
  CHECK_OK(mlfw_unscale_and_check(list, 2, 1.0f, NULL, &found, NULL));
  CHECK(found == 1);
  CHECK_OK(mlfw_has_non_finite(list, 2, NULL, &found));
  CHECK(found == 1);
  b[1] = 0.0f;
  CHECK_OK(mlfw_has_non_finite(list, 2, NULL, &found));
  CHECK(found == 0);

  /* sum of squares of factor * x: 4 * (1 + 4 + 9 + 16 + 0) */
  double sum = 0.0;
  CHECK_OK(mlfw_sum_of_squares(list, 2, 2.0f, NULL, &sum));
  CHECK(sum == 120.0);
  CHECK_OK(mlfw_scale_in_place(list, 1, -1.0f, NULL));
  CHECK(a[0] == -1.0f && a[1] == 2.0f && a[2] == -3.0f && b[0] == 4.0f);

  /* clipping: norm sqrt(30) clipped to 1; a norm below the bound leaves the values */
  double norm = 0.0;
  CHECK_OK(mlfw_clip_grad_norm(list, 2, 1.0, NULL, &norm));
  CHECK(fabs(norm - sqrt(30.0)) < 1e-6);
  const float coefficient = (float)(1.0 / (sqrt(30.0) + 1e-6));
  CHECK(fabsf(a[2] - (-3.0f * coefficient)) < 1e-6f && fabsf(b[0] - 4.0f * coefficient) < 1e-6f);
  const float kept = a[2];
  CHECK_OK(mlfw_clip_grad_norm(list, 2, 10.0, NULL, &norm));
  CHECK(fabs(norm - 1.0) < 1e-5 && a[2] == kept);

  /* casts: float32 -> float16 -> float32 keeps representable values; 1e5 overflows float16 */
  float src[3] = {1.5f, -2.0f, 0.25f};
  uint16_t half[3] = {0, 0, 0};
  float back[3] = {0.0f, 0.0f, 0.0f};
  DLTensor tsrc = CApiFloat32Vector(src, shape_a);
  DLTensor thalf = CApiFloat32Vector((float*)(void*)half, shape_a);
  thalf.dtype.bits = 16;
  DLTensor tback = CApiFloat32Vector(back, shape_a);
  const DLTensor* from[1] = {&tsrc};
  const DLTensor* to_half[1] = {&thalf};
  const DLTensor* to_back[1] = {&tback};
  CHECK_OK(mlfw_cast_into(from, to_half, 1, 1.0f, NULL, &found));
  CHECK(found == 0 && half[0] == 0x3E00 && half[1] == 0xC000 && half[2] == 0x3400);
  CHECK_OK(mlfw_cast_into(to_half, to_back, 1, 2.0f, NULL, NULL));
  CHECK(back[0] == 3.0f && back[1] == -4.0f && back[2] == 0.5f);
  src[1] = 1e5f;
  CHECK_OK(mlfw_cast_into(from, to_half, 1, 1.0f, NULL, &found));
  CHECK(found == 1);

  /* argument checks: nothing is written on failure */
  int untouched = 7;
  float a_before[3];
  memcpy(a_before, a, sizeof a);
  EXPECT_STATUS(mlfw_unscale_and_check(NULL, 2, 0.5f, NULL, &untouched, NULL), MLFW_STATUS_NULL_ARGUMENT, "'tensors'");
  EXPECT_STATUS(mlfw_unscale_and_check(list, 2, 0.5f, NULL, NULL, NULL), MLFW_STATUS_NULL_ARGUMENT, "'found_inf'");
  const DLTensor* with_null[2] = {&ta, NULL};
  EXPECT_STATUS(mlfw_unscale_and_check(with_null, 2, 0.5f, NULL, &untouched, NULL), MLFW_STATUS_NULL_ARGUMENT,
                "'tensors[1]'");
  DLTensor wrong = tb;
  wrong.dtype.code = kDLUInt;
  const DLTensor* with_wrong[2] = {&ta, &wrong};
  EXPECT_STATUS(mlfw_unscale_and_check(with_wrong, 2, 0.5f, NULL, &untouched, NULL), MLFW_STATUS_INVALID_ARGUMENT,
                "'tensors[1]->dtype'");
  EXPECT_STATUS(mlfw_unscale_and_check(list, 2, 0.5f, &untouched, &untouched, NULL), MLFW_STATUS_INVALID_ARGUMENT,
                "'stream'");
  CHECK(untouched == 7 && memcmp(a, a_before, sizeof a) == 0);
  EXPECT_STATUS(mlfw_has_non_finite(list, 2, NULL, NULL), MLFW_STATUS_NULL_ARGUMENT, "'found'");
  EXPECT_STATUS(mlfw_sum_of_squares(list, 2, 1.0f, NULL, NULL), MLFW_STATUS_NULL_ARGUMENT, "'sum'");
  EXPECT_STATUS(mlfw_clip_grad_norm(list, 2, 0.0, NULL, &norm), MLFW_STATUS_INVALID_ARGUMENT, "'max_norm'");
  EXPECT_STATUS(mlfw_clip_grad_norm(list, 2, NAN, NULL, &norm), MLFW_STATUS_INVALID_ARGUMENT, "'max_norm'");
  EXPECT_STATUS(mlfw_clip_grad_norm(list, 2, 1.0, NULL, NULL), MLFW_STATUS_NULL_ARGUMENT, "'total_norm'");
  const DLTensor* short_dst[1] = {&tb};
  EXPECT_STATUS(mlfw_cast_into(from, short_dst, 1, 1.0f, NULL, NULL), MLFW_STATUS_INVALID_ARGUMENT, "");
  EXPECT_STATUS(mlfw_cast_into(from, NULL, 1, 1.0f, NULL, NULL), MLFW_STATUS_NULL_ARGUMENT, "'dst'");
  CHECK(memcmp(a, a_before, sizeof a) == 0 && fabsf(b[0] - 4.0f * coefficient) < 1e-6f);
  /* fused optimizer steps on your own lists: the same results as the optimizer handles */
  float p_fused[3] = {0.5f, -1.0f, 2.0f};
  float p_handle[3] = {0.5f, -1.0f, 2.0f};
  float g[3] = {0.1f, -0.3f, 0.7f};
  float m[3] = {0.0f, 0.0f, 0.0f};
  float v[3] = {0.0f, 0.0f, 0.0f};
  DLTensor tp_fused = CApiFloat32Vector(p_fused, shape_a);
  DLTensor tp_handle = CApiFloat32Vector(p_handle, shape_a);
  DLTensor tg = CApiFloat32Vector(g, shape_a);
  DLTensor tm = CApiFloat32Vector(m, shape_a);
  DLTensor tv = CApiFloat32Vector(v, shape_a);
  const DLTensor* fused_params[1] = {&tp_fused};
  const DLTensor* handle_params[1] = {&tp_handle};
  const DLTensor* fused_grads[1] = {&tg};
  const DLTensor* first[1] = {&tm};
  const DLTensor* second[1] = {&tv};
  const char* names[1] = {"p"};
  mlfw_adam_options adam_options;
  CHECK_OK(mlfw_adam_options_default(&adam_options));
  adam_options.learning_rate = 0.1;
  adam_options.weight_decay = 0.01;
  adam_options.decoupled_weight_decay = 1;
  mlfw_optimizer_t adamw = NULL;
  CHECK_OK(mlfw_adam_create(names, handle_params, 1, &adam_options, &adamw));
  for (int64_t step = 1; step <= 3; ++step) {
    CHECK_OK(mlfw_fused_adam_step(fused_params, fused_grads, first, second, 1, &adam_options, step, NULL));
    CHECK_OK(mlfw_optimizer_set_gradients(adamw, names, fused_grads, 1));
    CHECK_OK(mlfw_optimizer_step(adamw, NULL));
    CHECK(memcmp(p_fused, p_handle, sizeof p_fused) == 0);
  }
  CHECK(p_fused[0] != 0.5f);
  mlfw_optimizer_destroy(adamw);

  mlfw_sgd_options sgd_options;
  CHECK_OK(mlfw_sgd_options_default(&sgd_options));
  sgd_options.momentum = 0.9;
  mlfw_optimizer_t sgd = NULL;
  CHECK_OK(mlfw_sgd_create(names, handle_params, 1, &sgd_options, &sgd));
  for (int step = 0; step < 3; ++step) {
    CHECK_OK(mlfw_fused_sgd_step(fused_params, fused_grads, first, 1, &sgd_options, step == 0, NULL));
    CHECK_OK(mlfw_optimizer_set_gradients(sgd, names, fused_grads, 1));
    CHECK_OK(mlfw_optimizer_step(sgd, NULL));
    CHECK(memcmp(p_fused, p_handle, sizeof p_fused) == 0);
  }
  mlfw_optimizer_destroy(sgd);
  memcpy(a_before, p_fused, sizeof a_before);
  EXPECT_STATUS(mlfw_fused_adam_step(fused_params, fused_grads, first, NULL, 1, &adam_options, 4, NULL),
                MLFW_STATUS_NULL_ARGUMENT, "'exp_avg_sq'");
  EXPECT_STATUS(mlfw_fused_adam_step(fused_params, fused_grads, first, second, 1, &adam_options, 0, NULL),
                MLFW_STATUS_INVALID_ARGUMENT, "step");
  EXPECT_STATUS(mlfw_fused_adam_step(fused_params, fused_grads, first, second, 1, NULL, 4, NULL),
                MLFW_STATUS_NULL_ARGUMENT, "'options'");
  const DLTensor* half_grads[1] = {&thalf};
  EXPECT_STATUS(mlfw_fused_sgd_step(fused_params, half_grads, first, 1, &sgd_options, 0, NULL),
                MLFW_STATUS_INVALID_ARGUMENT, "");
  /* The errors of the fused lists name the caller's arguments, not the C++ step's fields. */
  EXPECT_STATUS(mlfw_fused_sgd_step(fused_params, fused_grads, NULL, 1, &sgd_options, 0, NULL),
                MLFW_STATUS_INVALID_ARGUMENT, "'momentum_buffers': holds 0 tensors, expected 1");
  int64_t shape_short[1] = {2};
  DLTensor short_moment = CApiFloat32Vector(m, shape_short);
  const DLTensor* short_first[1] = {&short_moment};
  EXPECT_STATUS(mlfw_fused_adam_step(fused_params, fused_grads, short_first, second, 1, &adam_options, 4, NULL),
                MLFW_STATUS_INVALID_ARGUMENT, "'exp_avg[0]'");
  const DLTensor* short_grads[1] = {&short_moment};
  EXPECT_STATUS(mlfw_fused_adam_step(fused_params, short_grads, first, second, 1, &adam_options, 4, NULL),
                MLFW_STATUS_INVALID_ARGUMENT, "'gradients[0]'");
  /* A tensor the step writes over another entry's memory: refused naming both, nothing written. */
  const DLTensor* params_as_first[1] = {&tp_fused};
  EXPECT_STATUS(mlfw_fused_adam_step(fused_params, fused_grads, params_as_first, second, 1, &adam_options, 4, NULL),
                MLFW_STATUS_INVALID_ARGUMENT, "'exp_avg[0]': is the same memory as parameters[0]");
  const DLTensor* grads_as_buffers[1] = {&tg};
  EXPECT_STATUS(mlfw_fused_sgd_step(fused_params, fused_grads, grads_as_buffers, 1, &sgd_options, 0, NULL),
                MLFW_STATUS_INVALID_ARGUMENT, "'momentum_buffers[0]': is the same memory as gradients[0]");
  CHECK(memcmp(p_fused, a_before, sizeof a_before) == 0);
  CHECK(memcmp(g, (float[3]){0.1f, -0.3f, 0.7f}, sizeof g) == 0);

  printf("c api list operations ok\n");
  return 0;
}
