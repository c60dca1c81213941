/* Bad input through the C API: every null, wrong count, wrong dtype, bad setting and foreign
 * blob returns its status with the C++ API's message, and leaves every handle as it was (its
 * state bytes unchanged, and the next good call works). Runs under the sanitizers too. */
#include <string.h>

#include "CApiCheck.h"

enum { kSize = 3, kBlobCapacity = 4096 };

/* A policy whose scale is *user and whose update fails with 5 once *user is negative. */
static int GivenScale(void* user, float* scale) {
  *scale = *(const float*)user;
  return 0;
}
static int FailingUpdate(void* user, int overflow) {
  (void)overflow;
  return *(const float*)user < 0.0f ? 5 : 0;
}
static void IgnoreStep(void* user, const mlfw_step_event* event) {
  (void)user;
  (void)event;
}

/* The handles' state bytes, to show that a failed call changed nothing. */
typedef struct Snapshot {
  unsigned char scaler[kBlobCapacity];
  size_t scaler_size;
  unsigned char optimizer[kBlobCapacity];
  size_t optimizer_size;
} Snapshot;

static void Take(Snapshot* snapshot, mlfw_grad_scaler_t scaler, mlfw_optimizer_t optimizer) {
  CHECK_OK(mlfw_grad_scaler_state_dict(scaler, snapshot->scaler, kBlobCapacity, &snapshot->scaler_size));
  CHECK_OK(mlfw_optimizer_state_dict(optimizer, snapshot->optimizer, kBlobCapacity, &snapshot->optimizer_size));
}

static void ExpectUnchanged(const Snapshot* before, mlfw_grad_scaler_t scaler, mlfw_optimizer_t optimizer) {
  static Snapshot now;
  Take(&now, scaler, optimizer);
  CHECK(now.scaler_size == before->scaler_size && memcmp(now.scaler, before->scaler, now.scaler_size) == 0);
  CHECK(now.optimizer_size == before->optimizer_size &&
        memcmp(now.optimizer, before->optimizer, now.optimizer_size) == 0);
}

int main(void) {
  float weights[kSize] = {1.0f, 2.0f, 3.0f};
  float gradients[kSize] = {0.5f, 0.5f, 0.5f};
  int ints[kSize] = {1, 2, 3};
  int64_t shape[1] = {kSize};
  int64_t short_shape[1] = {kSize - 1};
  DLTensor weight = CApiFloat32Vector(weights, shape);
  DLTensor gradient = CApiFloat32Vector(gradients, shape);
  DLTensor int_tensor = CApiFloat32Vector((float*)(void*)ints, shape);
  int_tensor.dtype.code = kDLInt;
  DLTensor short_gradient = CApiFloat32Vector(gradients, short_shape);
  DLTensor strided = CApiFloat32Vector(gradients, shape);
  int64_t strides[1] = {2};
  strided.strides = strides;
  const char* names[2] = {"w", "w"};
  const char* null_name[1] = {NULL};
  const DLTensor* parameters[2] = {&weight, &weight};
  const DLTensor* null_tensor[1] = {NULL};
  const DLTensor* grads[1] = {&gradient};

  /* Creation: nothing is written to *out on failure. */
  mlfw_grad_scaler_t const sentinel_scaler = (mlfw_grad_scaler_t)(void*)&weights;
  mlfw_grad_scaler_t scaler = sentinel_scaler;
  mlfw_dynamic_scaler_config config;
  EXPECT_STATUS(mlfw_dynamic_scaler_config_default(NULL), MLFW_STATUS_NULL_ARGUMENT, "'config'");
  CHECK_OK(mlfw_dynamic_scaler_config_default(&config));
  CHECK(strcmp(mlfw_last_error(), "") == 0); /* a call that succeeds clears the message */
  EXPECT_STATUS(mlfw_grad_scaler_create_dynamic(NULL, &scaler), MLFW_STATUS_NULL_ARGUMENT, "'config'");
  EXPECT_STATUS(mlfw_grad_scaler_create_dynamic(&config, NULL), MLFW_STATUS_NULL_ARGUMENT, "'out'");
  config.growth_factor = 0.5f;
  EXPECT_STATUS(mlfw_grad_scaler_create_dynamic(&config, &scaler), MLFW_STATUS_INVALID_ARGUMENT, "rowth");
  config.growth_factor = 2.0f;
  config.growth_interval = 0;
  EXPECT_STATUS(mlfw_grad_scaler_create_dynamic(&config, &scaler), MLFW_STATUS_INVALID_ARGUMENT, "nterval");
  config.growth_interval = 2000;
  config.hysteresis = 0;
  EXPECT_STATUS(mlfw_grad_scaler_create_dynamic(&config, &scaler), MLFW_STATUS_INVALID_ARGUMENT, "ysteresis");
  config.hysteresis = 1;
  config.min_scale = 0.0f;
  EXPECT_STATUS(mlfw_grad_scaler_create_dynamic(&config, &scaler), MLFW_STATUS_INVALID_ARGUMENT, "in");
  config.min_scale = 1.0f;
  EXPECT_STATUS(mlfw_grad_scaler_create_static(-1.0f, 1, &scaler), MLFW_STATUS_INVALID_ARGUMENT, "-1");
  CHECK(scaler == sentinel_scaler);
  CHECK_OK(mlfw_grad_scaler_create_dynamic(&config, &scaler));

  mlfw_optimizer_t const sentinel_optimizer = (mlfw_optimizer_t)(void*)&weights;
  mlfw_optimizer_t adam = sentinel_optimizer;
  mlfw_adam_options options;
  CHECK_OK(mlfw_adam_options_default(&options));
  EXPECT_STATUS(mlfw_adam_create(NULL, parameters, 1, &options, &adam), MLFW_STATUS_NULL_ARGUMENT, "'names'");
  EXPECT_STATUS(mlfw_adam_create(names, NULL, 1, &options, &adam), MLFW_STATUS_NULL_ARGUMENT, "'parameters'");
  EXPECT_STATUS(mlfw_adam_create(null_name, parameters, 1, &options, &adam), MLFW_STATUS_NULL_ARGUMENT, "'names[0]'");
  EXPECT_STATUS(mlfw_adam_create(names, null_tensor, 1, &options, &adam), MLFW_STATUS_NULL_ARGUMENT, "'parameters[0]'");
  EXPECT_STATUS(mlfw_adam_create(names, parameters, 1, NULL, &adam), MLFW_STATUS_NULL_ARGUMENT, "'options'");
  EXPECT_STATUS(mlfw_adam_create(names, parameters, 1, &options, NULL), MLFW_STATUS_NULL_ARGUMENT, "'out'");
  EXPECT_STATUS(mlfw_adam_create(names, parameters, 2, &options, &adam), MLFW_STATUS_INVALID_ARGUMENT,
                "'names[1]': 'w' is given twice");
  const DLTensor* int_parameters[1] = {&int_tensor};
  EXPECT_STATUS(mlfw_adam_create(names, int_parameters, 1, &options, &adam), MLFW_STATUS_INVALID_ARGUMENT,
                "'parameters[0]->dtype'");
  const DLTensor* strided_parameters[1] = {&strided};
  EXPECT_STATUS(mlfw_adam_create(names, strided_parameters, 1, &options, &adam), MLFW_STATUS_INVALID_ARGUMENT,
                "'parameters[0]->strides[0]'");
  options.learning_rate = -1.0;
  EXPECT_STATUS(mlfw_adam_create(names, parameters, 1, &options, &adam), MLFW_STATUS_INVALID_ARGUMENT, "earning");
  options.learning_rate = 1e-3;
  mlfw_sgd_options sgd_options;
  EXPECT_STATUS(mlfw_sgd_options_default(NULL), MLFW_STATUS_NULL_ARGUMENT, "'options'");
  CHECK_OK(mlfw_sgd_options_default(&sgd_options));
  sgd_options.nesterov = 1; /* needs momentum */
  EXPECT_STATUS(mlfw_sgd_create(names, parameters, 1, &sgd_options, &adam), MLFW_STATUS_INVALID_ARGUMENT, "esterov");
  CHECK(adam == sentinel_optimizer);
  CHECK_OK(mlfw_adam_create(names, parameters, 1, &options, &adam));

  /* Calls on live handles: each failure leaves both as they were. */
  Snapshot before;
  Take(&before, scaler, adam);
  EXPECT_STATUS(mlfw_optimizer_set_gradients(NULL, names, grads, 1), MLFW_STATUS_NULL_ARGUMENT, "'optimizer'");
  EXPECT_STATUS(mlfw_optimizer_set_gradients(adam, NULL, grads, 1), MLFW_STATUS_NULL_ARGUMENT, "'names'");
  EXPECT_STATUS(mlfw_optimizer_set_gradients(adam, names, NULL, 1), MLFW_STATUS_NULL_ARGUMENT, "'gradients'");
  EXPECT_STATUS(mlfw_optimizer_set_gradients(adam, names, null_tensor, 1), MLFW_STATUS_NULL_ARGUMENT, "'gradients[0]'");
  const DLTensor* int_grads[1] = {&int_tensor};
  EXPECT_STATUS(mlfw_optimizer_set_gradients(adam, names, int_grads, 1), MLFW_STATUS_INVALID_ARGUMENT,
                "'gradients[0]->dtype'");
  const DLTensor* short_grads[1] = {&short_gradient};
  EXPECT_STATUS(mlfw_optimizer_set_gradients(adam, names, short_grads, 1), MLFW_STATUS_INVALID_ARGUMENT, "w");
  const char* other_name[1] = {"v"};
  EXPECT_STATUS(mlfw_optimizer_set_gradients(adam, other_name, grads, 1), MLFW_STATUS_INVALID_ARGUMENT, "v");
  const DLTensor* two_grads[2] = {&gradient, &gradient};
  const char* two_names[2] = {"w", "v"};
  EXPECT_STATUS(mlfw_optimizer_set_gradients(adam, two_names, two_grads, 2), MLFW_STATUS_INVALID_ARGUMENT, "v");
  EXPECT_STATUS(mlfw_optimizer_step(NULL, NULL), MLFW_STATUS_NULL_ARGUMENT, "'optimizer'");
  EXPECT_STATUS(mlfw_optimizer_step(adam, &before), MLFW_STATUS_INVALID_ARGUMENT, "'stream'");
  EXPECT_STATUS(mlfw_optimizer_set_learning_rate(adam, 0.0), MLFW_STATUS_INVALID_ARGUMENT, "0");
  EXPECT_STATUS(mlfw_optimizer_step_count(adam, NULL), MLFW_STATUS_NULL_ARGUMENT, "'steps'");
  ExpectUnchanged(&before, scaler, adam);

  float loss_value = 2.0f;
  int64_t scalar_shape[1] = {1};
  DLTensor loss = CApiFloat32Vector(&loss_value, scalar_shape);
  DLManagedTensor* scaled = NULL;
  EXPECT_STATUS(mlfw_grad_scaler_scale(NULL, &loss, NULL, &scaled), MLFW_STATUS_NULL_ARGUMENT, "'scaler'");
  EXPECT_STATUS(mlfw_grad_scaler_scale(scaler, NULL, NULL, &scaled), MLFW_STATUS_NULL_ARGUMENT, "'loss'");
  EXPECT_STATUS(mlfw_grad_scaler_scale(scaler, &loss, NULL, NULL), MLFW_STATUS_NULL_ARGUMENT, "'scaled'");
  EXPECT_STATUS(mlfw_grad_scaler_scale(scaler, &int_tensor, NULL, &scaled), MLFW_STATUS_INVALID_ARGUMENT,
                "'loss->dtype'");
  EXPECT_STATUS(mlfw_grad_scaler_scale(scaler, &loss, &before, &scaled), MLFW_STATUS_INVALID_ARGUMENT, "'stream'");
  CHECK(scaled == NULL);
  EXPECT_STATUS(mlfw_grad_scaler_update(scaler, NULL), MLFW_STATUS_INVALID_OPERATION, "");
  EXPECT_STATUS(mlfw_grad_scaler_step(scaler, NULL, MLFW_STEP_AND_UPDATE, NULL, NULL), MLFW_STATUS_NULL_ARGUMENT,
                "'optimizer'");
  EXPECT_STATUS(mlfw_grad_scaler_step(scaler, adam, (mlfw_step_mode)7, NULL, NULL), MLFW_STATUS_INVALID_ARGUMENT,
                "'mode': 7");
  EXPECT_STATUS(mlfw_grad_scaler_unscale(NULL, adam, NULL), MLFW_STATUS_NULL_ARGUMENT, "'scaler'");
  float scale = 0.0f;
  int has = 0;
  mlfw_scaler_stats stats;
  EXPECT_STATUS(mlfw_grad_scaler_get_scale(scaler, NULL), MLFW_STATUS_NULL_ARGUMENT, "'scale'");
  EXPECT_STATUS(mlfw_grad_scaler_get_stats(scaler, NULL, &has), MLFW_STATUS_NULL_ARGUMENT, "'stats'");
  EXPECT_STATUS(mlfw_grad_scaler_get_stats(scaler, &stats, NULL), MLFW_STATUS_NULL_ARGUMENT, "'has_stats'");
  EXPECT_STATUS(mlfw_grad_scaler_last_amax(scaler, &scale, NULL), MLFW_STATUS_NULL_ARGUMENT, "'has_amax'");
  ExpectUnchanged(&before, scaler, adam);

  /* Blobs: a short buffer, a null one, a truncated, corrupted or foreign one. */
  size_t size = 0;
  unsigned char buffer[kBlobCapacity];
  EXPECT_STATUS(mlfw_grad_scaler_state_dict(scaler, buffer, 4, &size), MLFW_STATUS_INVALID_ARGUMENT, "'capacity'");
  EXPECT_STATUS(mlfw_grad_scaler_state_dict(scaler, buffer, sizeof buffer, NULL), MLFW_STATUS_NULL_ARGUMENT, "'size'");
  EXPECT_STATUS(mlfw_grad_scaler_load_state_dict(scaler, NULL, 8), MLFW_STATUS_NULL_ARGUMENT, "'data'");
  EXPECT_STATUS(mlfw_grad_scaler_load_state_dict(scaler, before.scaler, before.scaler_size - 1),
                MLFW_STATUS_INVALID_ARGUMENT, "");
  EXPECT_STATUS(mlfw_grad_scaler_load_state_dict(scaler, before.optimizer, before.optimizer_size),
                MLFW_STATUS_INVALID_ARGUMENT, "");
  memcpy(buffer, before.scaler, before.scaler_size);
  buffer[0] ^= 0xFF;
  EXPECT_STATUS(mlfw_grad_scaler_load_state_dict(scaler, buffer, before.scaler_size), MLFW_STATUS_INVALID_ARGUMENT, "");
  EXPECT_STATUS(mlfw_optimizer_state_dict(adam, buffer, 1, &size), MLFW_STATUS_INVALID_ARGUMENT, "'capacity'");
  EXPECT_STATUS(mlfw_optimizer_load_state_dict(adam, before.scaler, before.scaler_size), MLFW_STATUS_INVALID_ARGUMENT,
                "");
  EXPECT_STATUS(mlfw_optimizer_load_state_dict(adam, before.optimizer, before.optimizer_size / 2),
                MLFW_STATUS_INVALID_ARGUMENT, "");
  ExpectUnchanged(&before, scaler, adam);

  /* In the middle of an iteration: a second unscale of the same optimizer is refused. */
  CHECK_OK(mlfw_grad_scaler_scale(scaler, &loss, NULL, &scaled));
  scaled->deleter(scaled);
  CHECK_OK(mlfw_optimizer_set_gradients(adam, names, grads, 1));
  CHECK_OK(mlfw_grad_scaler_unscale(scaler, adam, NULL));
  Take(&before, scaler, adam);
  EXPECT_STATUS(mlfw_grad_scaler_unscale(scaler, adam, NULL), MLFW_STATUS_INVALID_OPERATION, "");
  ExpectUnchanged(&before, scaler, adam);
  int stepped = -1;
  CHECK_OK(mlfw_grad_scaler_step(scaler, adam, MLFW_STEP_AND_UPDATE, NULL, &stepped));
  CHECK(stepped == 1);

  /* Callbacks: missing ones, a scale that is not > 0, an update that fails. */
  float policy_scale = 0.0f;
  mlfw_scale_policy policy = {GivenScale, FailingUpdate, NULL};
  mlfw_grad_scaler_t custom = sentinel_scaler;
  EXPECT_STATUS(mlfw_grad_scaler_create_custom(NULL, &policy_scale, &custom), MLFW_STATUS_NULL_ARGUMENT, "'policy'");
  policy.scale = NULL;
  EXPECT_STATUS(mlfw_grad_scaler_create_custom(&policy, &policy_scale, &custom), MLFW_STATUS_NULL_ARGUMENT,
                "'policy->scale'");
  policy.scale = GivenScale;
  policy.update = NULL;
  EXPECT_STATUS(mlfw_grad_scaler_create_custom(&policy, &policy_scale, &custom), MLFW_STATUS_NULL_ARGUMENT,
                "'policy->update'");
  policy.update = FailingUpdate;
  EXPECT_STATUS(mlfw_grad_scaler_create_custom(&policy, &policy_scale, &custom), MLFW_STATUS_INVALID_ARGUMENT,
                "not finite and > 0");
  CHECK(custom == sentinel_scaler);
  policy_scale = 8.0f;
  CHECK_OK(mlfw_grad_scaler_create_custom(&policy, &policy_scale, &custom));
  CHECK_OK(mlfw_grad_scaler_scale(custom, &loss, NULL, &scaled));
  CHECK(((const float*)scaled->dl_tensor.data)[0] == 16.0f);
  scaled->deleter(scaled);
  CHECK_OK(mlfw_optimizer_set_gradients(adam, names, grads, 1));
  CHECK_OK(mlfw_grad_scaler_step(custom, adam, MLFW_STEP_DEFER_UPDATE, NULL, &stepped));
  policy_scale = -1.0f;
  EXPECT_STATUS(mlfw_grad_scaler_update(custom, NULL), MLFW_STATUS_CALLBACK_ERROR, "callback 'update' returned 5");
  mlfw_grad_scaler_destroy(custom);

  mlfw_observer_t observer = NULL;
  EXPECT_STATUS(mlfw_observer_create(NULL, NULL, &observer), MLFW_STATUS_NULL_ARGUMENT, "'on_step'");
  EXPECT_STATUS(mlfw_observer_create(IgnoreStep, NULL, NULL), MLFW_STATUS_NULL_ARGUMENT, "'out'");
  CHECK_OK(mlfw_observer_create(IgnoreStep, NULL, &observer));
  EXPECT_STATUS(mlfw_grad_scaler_add_observer(scaler, NULL), MLFW_STATUS_NULL_ARGUMENT, "'observer'");
  CHECK_OK(mlfw_grad_scaler_add_observer(scaler, observer));
  EXPECT_STATUS(mlfw_grad_scaler_add_observer(scaler, observer), MLFW_STATUS_INVALID_ARGUMENT, "observer");
  int removed = -1;
  CHECK_OK(mlfw_grad_scaler_remove_observer(scaler, observer, &removed));
  CHECK(removed == 1);
  CHECK_OK(mlfw_grad_scaler_remove_observer(scaler, observer, &removed));
  CHECK(removed == 0);
  mlfw_observer_destroy(observer);

  CHECK(strcmp(mlfw_status_name(MLFW_STATUS_INVALID_OPERATION), "MLFW_STATUS_INVALID_OPERATION") == 0);
  CHECK(strcmp(mlfw_status_name((mlfw_status)99), "unknown mlfw_status") == 0);
  mlfw_optimizer_destroy(NULL);
  mlfw_grad_scaler_destroy(NULL);
  mlfw_optimizer_destroy(adam);
  mlfw_grad_scaler_destroy(scaler);
  printf("c api bad input ok\n");
  return 0;
}
