/* A training loop through the C API alone: a dynamic GradScaler and Adam over float32
 * parameters, with an overflow injected into one iteration. Checks the PyTorch iteration's
 * decisions (the overflowed step skipped, the scale backed off then grown), the optimizer's
 * progress, and the state blobs of both handles. Then a scaling policy of its own through C
 * callbacks, with an observer callback, over SGD with another injected overflow. */
#include <math.h>
#include <string.h>

#include "CApiCheck.h"

enum { kSize = 4, kIterations = 12, kOverflowAt = 3 };

/* loss = sum((w - target)^2) / 2, gradient = w - target; both times the loss scale. */
static float Loss(const float* weights, const float* target) {
  float loss = 0.0f;
  for (int i = 0; i < kSize; ++i) {
    loss += 0.5f * (weights[i] - target[i]) * (weights[i] - target[i]);
  }
  return loss;
}

/* One parameter "w" and its gradient, as the DLTensors the C API borrows (set up in place:
 * the descriptors point into the struct). */
typedef struct Model {
  float weights[kSize];
  float gradients[kSize];
  int64_t shape[1];
  DLTensor weight_tensor;
  DLTensor gradient_tensor;
  const char* names[1];
  const DLTensor* parameters[1];
  const DLTensor* grads[1];
} Model;

static void InitModel(Model* model) {
  const float initial[kSize] = {1.0f, -1.0f, 0.5f, 2.0f};
  memcpy(model->weights, initial, sizeof initial);
  memset(model->gradients, 0, sizeof model->gradients);
  model->shape[0] = kSize;
  model->weight_tensor = CApiFloat32Vector(model->weights, model->shape);
  model->gradient_tensor = CApiFloat32Vector(model->gradients, model->shape);
  model->names[0] = "w";
  model->parameters[0] = &model->weight_tensor;
  model->grads[0] = &model->gradient_tensor;
}

/* A policy: halve on overflow, never grow; counts its calls. */
typedef struct BackoffOnly {
  float scale;
  int updates;
  int overflows;
} BackoffOnly;

static int PolicyScale(void* user, float* scale) {
  *scale = ((const BackoffOnly*)user)->scale;
  return 0;
}

static int PolicyUpdate(void* user, int overflow) {
  BackoffOnly* policy = (BackoffOnly*)user;
  ++policy->updates;
  if (overflow) {
    ++policy->overflows;
    policy->scale *= 0.5f;
  }
  return 0;
}

/* What the observer saw. */
typedef struct Seen {
  int steps;
  int skipped;
  int64_t last_step;
  float last_new_scale;
  size_t overflowed_tensors;
  int report_names_w;
} Seen;

static void OnStep(void* user, const mlfw_step_event* event) {
  Seen* seen = (Seen*)user;
  ++seen->steps;
  seen->skipped += event->skipped;
  seen->last_step = event->step;
  seen->last_new_scale = event->new_loss_scale;
  seen->overflowed_tensors += event->overflowed_tensors;
  if (event->skipped && strstr(event->overflow_report, "w") != NULL) {
    seen->report_names_w = 1;
  }
}

/* SGD under a custom policy given as callbacks, observed through a callback. */
static void CustomPolicyLoop(void) {
  static Model model;
  InitModel(&model);

  BackoffOnly policy_state = {4096.0f, 0, 0};
  mlfw_scale_policy policy = {PolicyScale, PolicyUpdate, NULL};
  mlfw_grad_scaler_t scaler = NULL;
  CHECK_OK(mlfw_grad_scaler_create_custom(&policy, &policy_state, &scaler));
  Seen seen = {0, 0, -1, 0.0f, 0, 0};
  mlfw_observer_t observer = NULL;
  CHECK_OK(mlfw_observer_create(OnStep, &seen, &observer));
  CHECK_OK(mlfw_grad_scaler_add_observer(scaler, observer));
  mlfw_sgd_options options;
  CHECK_OK(mlfw_sgd_options_default(&options));
  options.learning_rate = 0.25;
  mlfw_optimizer_t sgd = NULL;
  CHECK_OK(mlfw_sgd_create(model.names, model.parameters, 1, &options, &sgd));

  for (int iteration = 0; iteration < 6; ++iteration) {
    float scale = 0.0f;
    CHECK_OK(mlfw_grad_scaler_get_scale(scaler, &scale));
    CHECK(scale == policy_state.scale);
    float loss_value = Loss(model.weights, model.weights);
    int64_t scalar_shape[1] = {1};
    DLTensor loss = CApiFloat32Vector(&loss_value, scalar_shape);
    DLManagedTensor* scaled = NULL;
    CHECK_OK(mlfw_grad_scaler_scale(scaler, &loss, NULL, &scaled));
    scaled->deleter(scaled);
    float expected[kSize];
    for (int i = 0; i < kSize; ++i) {
      model.gradients[i] = scale * model.weights[i];
      expected[i] = model.weights[i] - 0.25f * model.weights[i]; /* plain SGD on the unscaled gradient */
    }
    if (iteration == 2) {
      model.gradients[0] = NAN;
      memcpy(expected, model.weights, sizeof expected);
    }
    CHECK_OK(mlfw_optimizer_set_gradients(sgd, model.names, model.grads, 1));
    int stepped = -1;
    /* the deferred flow: step now, update the scale afterwards */
    CHECK_OK(mlfw_grad_scaler_step(scaler, sgd, MLFW_STEP_DEFER_UPDATE, NULL, &stepped));
    CHECK_OK(mlfw_grad_scaler_update(scaler, NULL));
    CHECK(stepped == (iteration == 2 ? 0 : 1));
    CHECK(memcmp(model.weights, expected, sizeof expected) == 0);
  }
  CHECK(policy_state.updates == 6 && policy_state.overflows == 1 && policy_state.scale == 2048.0f);
  CHECK(seen.steps == 6 && seen.skipped == 1 && seen.last_step == 5 && seen.last_new_scale == 2048.0f);
  CHECK(seen.overflowed_tensors == 1 && seen.report_names_w == 1);
  int removed = 0;
  CHECK_OK(mlfw_grad_scaler_remove_observer(scaler, observer, &removed));
  CHECK(removed == 1);
  mlfw_observer_destroy(observer);
  mlfw_optimizer_destroy(sgd);
  mlfw_grad_scaler_destroy(scaler);
}

int main(void) {
  CHECK(mlfw_api_version() == MLFW_C_API_VERSION);

  const float target[kSize] = {0.0f, 0.0f, 0.0f, 0.0f};
  static Model model;
  InitModel(&model);

  mlfw_dynamic_scaler_config config;
  CHECK_OK(mlfw_dynamic_scaler_config_default(&config));
  CHECK(config.initial_scale == 65536.0f && config.growth_interval == 2000 && config.enabled == 1);
  config.initial_scale = 1024.0f;
  config.growth_interval = 4;
  mlfw_grad_scaler_t scaler = NULL;
  CHECK_OK(mlfw_grad_scaler_create_dynamic(&config, &scaler));

  mlfw_adam_options options;
  CHECK_OK(mlfw_adam_options_default(&options));
  options.learning_rate = 0.05;
  mlfw_optimizer_t adam = NULL;
  CHECK_OK(mlfw_adam_create(model.names, model.parameters, 1, &options, &adam));

  const float first_loss = Loss(model.weights, target);
  int skipped = 0;
  for (int iteration = 0; iteration < kIterations; ++iteration) {
    float loss_value = Loss(model.weights, target);
    int64_t scalar_shape[1] = {1};
    DLTensor loss = CApiFloat32Vector(&loss_value, scalar_shape);
    float scale = 0.0f;
    CHECK_OK(mlfw_grad_scaler_get_scale(scaler, &scale));
    DLManagedTensor* scaled = NULL;
    CHECK_OK(mlfw_grad_scaler_scale(scaler, &loss, NULL, &scaled));
    CHECK(scaled != NULL && scaled->dl_tensor.dtype.code == kDLFloat && scaled->dl_tensor.dtype.bits == 32);
    CHECK(((const float*)scaled->dl_tensor.data)[0] == loss_value * scale);
    scaled->deleter(scaled);

    /* "backward": the scaled model.gradients, with an Inf in one iteration */
    for (int i = 0; i < kSize; ++i) {
      model.gradients[i] = scale * (model.weights[i] - target[i]);
    }
    if (iteration == kOverflowAt) {
      model.gradients[2] = INFINITY;
    }
    float before[kSize];
    memcpy(before, model.weights, sizeof before);
    CHECK_OK(mlfw_optimizer_set_gradients(adam, model.names, model.grads, 1));
    int stepped = -1;
    CHECK_OK(mlfw_grad_scaler_step(scaler, adam, MLFW_STEP_AND_UPDATE, NULL, &stepped));
    float after_scale = 0.0f;
    CHECK_OK(mlfw_grad_scaler_get_scale(scaler, &after_scale));
    if (iteration == kOverflowAt) {
      CHECK(stepped == 0);
      CHECK(memcmp(before, model.weights, sizeof before) == 0); /* the step was skipped */
      CHECK(after_scale == scale * 0.5f);                       /* and the scale backed off */
      ++skipped;
    } else {
      CHECK(stepped == 1);
      CHECK(memcmp(before, model.weights, sizeof before) != 0);
    }
  }

  /* 3 clean steps, the overflow backs off to 512, then 8 clean steps grow it twice */
  float scale = 0.0f;
  CHECK_OK(mlfw_grad_scaler_get_scale(scaler, &scale));
  CHECK(scale == 2048.0f);
  mlfw_scaler_stats stats;
  int has_stats = 0;
  CHECK_OK(mlfw_grad_scaler_get_stats(scaler, &stats, &has_stats));
  CHECK(has_stats == 1);
  CHECK(stats.total_steps == kIterations && stats.skipped_steps == skipped && stats.total_overflows == 1);
  CHECK(stats.current_scale == scale && stats.growth_interval == 4);
  CHECK(Loss(model.weights, target) < first_loss);
  int64_t steps = 0;
  CHECK_OK(mlfw_optimizer_step_count(adam, &steps));
  CHECK(steps == kIterations - skipped);

  /* The scaler's state through bytes: a fresh scaler (other settings) takes the saved one. */
  size_t size = 0;
  CHECK_OK(mlfw_grad_scaler_state_dict(scaler, NULL, 0, &size));
  CHECK(size > 0);
  unsigned char* blob = malloc(size);
  CHECK(blob != NULL);
  size_t written = 0;
  CHECK_OK(mlfw_grad_scaler_state_dict(scaler, blob, size, &written));
  CHECK(written == size);
  mlfw_grad_scaler_t restored = NULL;
  CHECK_OK(mlfw_dynamic_scaler_config_default(&config));
  CHECK_OK(mlfw_grad_scaler_create_dynamic(&config, &restored));
  CHECK_OK(mlfw_grad_scaler_load_state_dict(restored, blob, size));
  mlfw_scaler_stats restored_stats;
  CHECK_OK(mlfw_grad_scaler_get_stats(restored, &restored_stats, &has_stats));
  CHECK(restored_stats.current_scale == 2048.0f && restored_stats.growth_interval == 4);
  CHECK(restored_stats.total_overflows == 1);
  free(blob);

  /* The optimizer's state: a second Adam loaded from the first steps identically. */
  CHECK_OK(mlfw_optimizer_state_dict(adam, NULL, 0, &size));
  blob = malloc(size);
  CHECK(blob != NULL);
  CHECK_OK(mlfw_optimizer_state_dict(adam, blob, size, &written));
  float twin_weights[kSize];
  memcpy(twin_weights, model.weights, sizeof twin_weights);
  DLTensor twin_tensor = CApiFloat32Vector(twin_weights, model.shape);
  const DLTensor* twin_parameters[1] = {&twin_tensor};
  mlfw_optimizer_t twin = NULL;
  CHECK_OK(mlfw_adam_create(model.names, twin_parameters, 1, &options, &twin));
  CHECK_OK(mlfw_optimizer_load_state_dict(twin, blob, written));
  free(blob);
  for (int i = 0; i < kSize; ++i) {
    model.gradients[i] = model.weights[i] - target[i];
  }
  CHECK_OK(mlfw_optimizer_set_gradients(adam, model.names, model.grads, 1));
  CHECK_OK(mlfw_optimizer_set_gradients(twin, model.names, model.grads, 1));
  CHECK_OK(mlfw_optimizer_step(adam, NULL));
  CHECK_OK(mlfw_optimizer_step(twin, NULL));
  CHECK(memcmp(model.weights, twin_weights, sizeof twin_weights) == 0);

  mlfw_optimizer_destroy(twin);
  mlfw_optimizer_destroy(adam);
  mlfw_grad_scaler_destroy(restored);
  mlfw_grad_scaler_destroy(scaler);
  CustomPolicyLoop();
  printf("c api training loop ok (scale %g, %d skipped)\n", (double)scale, skipped);
  return 0;
}
