/* The optimizers' state and master formats through the C API (version 2): Adam with 8-bit
 * moments and BF16 masters rounded stochastically over BF16 parameters, SGD with 8-bit momentum.
 * Checks that the formats are taken (the state blob shrinks, training still converges), that a
 * saved state continues bit for bit in a second optimizer, and that bad formats are refused with
 * a message naming the field, the handle left unwritten. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "CApiCheck.h"

enum { kSize = 1000, kSteps = 40 }; /* three blocks of 256 and a partial one */

/* FP32 to BF16 bits, round to nearest even (the values here are finite). */
static uint16_t ToBFloat16(float value) {
  uint32_t bits = 0;
  memcpy(&bits, &value, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

static float FromBFloat16(uint16_t code) {
  const uint32_t bits = (uint32_t)code << 16;
  float value = 0.0f;
  memcpy(&value, &bits, sizeof value);
  return value;
}

/* One BF16 parameter "w" of kSize elements and its BF16 gradient, as borrowed DLTensors. */
typedef struct Model {
  uint16_t weights[kSize];
  uint16_t gradients[kSize];
  float target[kSize];
  int64_t shape[1];
  DLTensor weight_tensor;
  DLTensor gradient_tensor;
  const char* names[1];
  const DLTensor* parameters[1];
  const DLTensor* grads[1];
} Model;

static DLTensor BFloat16Vector(uint16_t* data, int64_t* shape) {
  DLTensor tensor = CApiFloat32Vector((float*)(void*)data, shape);
  tensor.dtype.code = kDLBfloat;
  tensor.dtype.bits = 16;
  return tensor;
}

static void InitModel(Model* model) {
  for (int i = 0; i < kSize; ++i) {
    /* Magnitudes spread over two decades inside each block, as real weights are. */
    const float spread = powf(10.0f, (float)(i % 7) / 3.0f - 1.5f);
    model->weights[i] = ToBFloat16(spread * sinf(0.37f * (float)i));
    model->target[i] = spread * cosf(0.11f * (float)i);
    model->gradients[i] = 0;
  }
  model->shape[0] = kSize;
  model->weight_tensor = BFloat16Vector(model->weights, model->shape);
  model->gradient_tensor = BFloat16Vector(model->gradients, model->shape);
  model->names[0] = "w";
  model->parameters[0] = &model->weight_tensor;
  model->grads[0] = &model->gradient_tensor;
}

/* Writes the gradient of sum((w - target)^2) / 2 and returns that loss. */
static double Gradients(Model* model) {
  double loss = 0.0;
  for (int i = 0; i < kSize; ++i) {
    const float diff = FromBFloat16(model->weights[i]) - model->target[i];
    model->gradients[i] = ToBFloat16(diff);
    loss += 0.5 * (double)diff * (double)diff;
  }
  return loss;
}

static void Step(mlfw_optimizer_t optimizer, Model* model) {
  Gradients(model);
  CHECK_OK(mlfw_optimizer_set_gradients(optimizer, model->names, model->grads, 1));
  CHECK_OK(mlfw_optimizer_step(optimizer, NULL));
}

static size_t StateBytes(mlfw_optimizer_t optimizer) {
  size_t size = 0;
  CHECK_OK(mlfw_optimizer_state_dict(optimizer, NULL, 0, &size));
  return size;
}

static mlfw_adam_options AdamOptions(void) {
  mlfw_adam_options options;
  CHECK_OK(mlfw_adam_options_default(&options));
  options.learning_rate = 0.1;
  options.weight_decay = 1e-2;
  options.decoupled_weight_decay = 1;
  return options;
}

/* 8-bit moments and BF16 masters with stochastic rounding: 4.03 bytes a parameter. */
static mlfw_state_options LowBitStates(void) {
  mlfw_state_options states;
  CHECK_OK(mlfw_state_options_default(&states));
  states.first = MLFW_STATE_INT8_BLOCK;
  states.second = MLFW_STATE_UINT8_BLOCK;
  states.masters = MLFW_MASTERS_BFLOAT16_STOCHASTIC_ROUNDING;
  states.rounding_seed = 1234;
  return states;
}

static void Defaults(void) {
  mlfw_state_options states;
  memset(&states, 0xff, sizeof states);
  CHECK_OK(mlfw_state_options_default(&states));
  CHECK(states.first == MLFW_STATE_FLOAT32);
  CHECK(states.second == MLFW_STATE_FLOAT32);
  CHECK(states.block_size == 256);
  CHECK(states.masters == MLFW_MASTERS_FLOAT32);
  CHECK(states.rounding_seed == 0);
  EXPECT_STATUS(mlfw_state_options_default(NULL), MLFW_STATUS_NULL_ARGUMENT, "options");
  CHECK(mlfw_api_version() >= 2);
}

/* Adam in the low formats learns, keeps fewer bytes, and continues bit for bit after a save. */
static void LowBitAdam(void) {
  static Model model;
  static Model copy;
  InitModel(&model);
  const mlfw_adam_options options = AdamOptions();
  const mlfw_state_options states = LowBitStates();
  mlfw_optimizer_t adam = NULL;
  CHECK_OK(mlfw_adam_create_with_states(model.names, model.parameters, 1, &options, &states, &adam));

  /* The same optimizer with FP32 state and masters, for the blob sizes. */
  static Model reference;
  InitModel(&reference);
  mlfw_state_options fp32;
  CHECK_OK(mlfw_state_options_default(&fp32));
  mlfw_optimizer_t full = NULL;
  CHECK_OK(mlfw_adam_create_with_states(reference.names, reference.parameters, 1, &options, &fp32, &full));

  const double initial = Gradients(&model);
  for (int step = 0; step < kSteps / 2; ++step) {
    Step(adam, &model);
    Step(full, &reference);
  }
  /* The blob holds the masters as FP32 values in either case, and the moments as stored: 4 + 2
   * bytes an element (plus the scales) against 4 + 8. */
  const size_t low_bytes = StateBytes(adam);
  const size_t full_bytes = StateBytes(full);
  CHECK(low_bytes < full_bytes * 6 / 10);
  CHECK(memcmp(model.weights, reference.weights, sizeof model.weights) != 0);

  /* Save, restore into a second optimizer over a copy of the parameters, and step both. */
  void* blob = malloc(low_bytes);
  CHECK(blob != NULL);
  size_t written = 0;
  CHECK_OK(mlfw_optimizer_state_dict(adam, blob, low_bytes, &written));
  CHECK(written == low_bytes);
  InitModel(&copy);
  memcpy(copy.weights, model.weights, sizeof copy.weights);
  mlfw_optimizer_t restored = NULL;
  CHECK_OK(mlfw_adam_create_with_states(copy.names, copy.parameters, 1, &options, &states, &restored));
  CHECK_OK(mlfw_optimizer_load_state_dict(restored, blob, written));
  free(blob);
  for (int step = kSteps / 2; step < kSteps; ++step) {
    Step(adam, &model);
    Step(restored, &copy);
  }
  CHECK(memcmp(model.weights, copy.weights, sizeof model.weights) == 0);
  int64_t steps = 0;
  CHECK_OK(mlfw_optimizer_step_count(restored, &steps));
  CHECK(steps == kSteps);
  /* It learns: the loss falls to a small share of where it started. */
  const double final_loss = Gradients(&model);
  printf("Adam, 8-bit moments, BF16 masters: loss %.4f -> %.4f\n", initial, final_loss);
  CHECK(final_loss < 0.2 * initial);

  mlfw_optimizer_destroy(restored);
  mlfw_optimizer_destroy(full);
  mlfw_optimizer_destroy(adam);
}

/* SGD with 8-bit momentum learns too; Adam's second state is refused for it. */
static void LowBitSGD(void) {
  static Model model;
  InitModel(&model);
  mlfw_sgd_options options;
  CHECK_OK(mlfw_sgd_options_default(&options));
  options.learning_rate = 0.1;
  options.momentum = 0.9;
  mlfw_state_options states;
  CHECK_OK(mlfw_state_options_default(&states));
  states.first = MLFW_STATE_INT8_BLOCK;
  states.block_size = 128;
  mlfw_optimizer_t sgd = NULL;
  CHECK_OK(mlfw_sgd_create_with_states(model.names, model.parameters, 1, &options, &states, &sgd));
  const double initial = Gradients(&model);
  for (int step = 0; step < kSteps; ++step) {
    Step(sgd, &model);
  }
  const double final_loss = Gradients(&model);
  printf("SGD, 8-bit momentum: loss %.4f -> %.4f\n", initial, final_loss);
  CHECK(final_loss < 0.2 * initial);
  mlfw_optimizer_destroy(sgd);

  mlfw_optimizer_t sentinel = (mlfw_optimizer_t)(uintptr_t)0x1;
  mlfw_optimizer_t out = sentinel;
  states.second = MLFW_STATE_UINT8_BLOCK;
  EXPECT_STATUS(mlfw_sgd_create_with_states(model.names, model.parameters, 1, &options, &states, &out),
                MLFW_STATUS_INVALID_ARGUMENT, "states->second");
  CHECK(out == sentinel);
}

/* Bad formats: an error naming the field and its value, and no handle. */
static void BadStates(void) {
  static Model model;
  InitModel(&model);
  const mlfw_adam_options options = AdamOptions();
  mlfw_optimizer_t sentinel = (mlfw_optimizer_t)(uintptr_t)0x1;
  mlfw_optimizer_t out = sentinel;
  mlfw_state_options states = LowBitStates();

  int bad = 99;
  memcpy(&states.first, &bad, sizeof bad);
  EXPECT_STATUS(mlfw_adam_create_with_states(model.names, model.parameters, 1, &options, &states, &out),
                MLFW_STATUS_INVALID_ARGUMENT, "states->first");
  EXPECT_STATUS(mlfw_adam_create_with_states(model.names, model.parameters, 1, &options, &states, &out),
                MLFW_STATUS_INVALID_ARGUMENT, "99");
  states = LowBitStates();
  memcpy(&states.masters, &bad, sizeof bad);
  EXPECT_STATUS(mlfw_adam_create_with_states(model.names, model.parameters, 1, &options, &states, &out),
                MLFW_STATUS_INVALID_ARGUMENT, "states->masters");

  states = LowBitStates();
  states.first = MLFW_STATE_UINT8_BLOCK;
  EXPECT_STATUS(mlfw_adam_create_with_states(model.names, model.parameters, 1, &options, &states, &out),
                MLFW_STATUS_INVALID_ARGUMENT, "is MLFW_STATE_UINT8_BLOCK; unsigned codes hold only the second moment");
  states = LowBitStates();
  states.second = MLFW_STATE_INT8_BLOCK;
  EXPECT_STATUS(mlfw_adam_create_with_states(model.names, model.parameters, 1, &options, &states, &out),
                MLFW_STATUS_INVALID_ARGUMENT, "is MLFW_STATE_INT8_BLOCK; the second moment takes MLFW_STATE_UINT8_BLOCK");
  states = LowBitStates();
  states.block_size = 100;
  EXPECT_STATUS(mlfw_adam_create_with_states(model.names, model.parameters, 1, &options, &states, &out),
                MLFW_STATUS_INVALID_ARGUMENT, "100");

  /* BF16 masters need BF16 parameters: FP32 ones are refused. */
  float weights[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  int64_t shape[1] = {4};
  const DLTensor fp32 = CApiFloat32Vector(weights, shape);
  const DLTensor* fp32_parameters[1] = {&fp32};
  states = LowBitStates();
  EXPECT_STATUS(mlfw_adam_create_with_states(model.names, fp32_parameters, 1, &options, &states, &out),
                MLFW_STATUS_INVALID_ARGUMENT, "BF16");

  EXPECT_STATUS(mlfw_adam_create_with_states(model.names, model.parameters, 1, &options, NULL, &out),
                MLFW_STATUS_NULL_ARGUMENT, "states");
  CHECK(out == sentinel);
}

int main(void) {
  Defaults();
  LowBitAdam();
  LowBitSGD();
  BadStates();
  printf("c_api_optimizer_states: ok\n");
  return 0;
}
