/* A bad field of a C settings struct, or a bad scalar argument, fails with a message that names
 * it as the C caller wrote it (`config->growth_factor`, `states->block_size`, `learning_rate`),
 * never the C++ field it becomes (`GrowthFactor`), the message's text included. */
#include <math.h>
#include <string.h>

#include "CApiCheck.h"

/* @p call fails with MLFW_STATUS_INVALID_ARGUMENT, naming @p c_name ("'config->growth_factor'")
 * and not the C++ name @p cpp_name anywhere in the message. */
#define EXPECT_C_NAME(call, c_name, cpp_name)                                                               \
  do {                                                                                                      \
    const mlfw_status got_ = (call);                                                                        \
    const char* message_ = mlfw_last_error();                                                               \
    if (got_ != MLFW_STATUS_INVALID_ARGUMENT || strstr(message_, (c_name)) == NULL ||                       \
        strstr(message_, (cpp_name)) != NULL) {                                                             \
      fprintf(stderr, "%s:%d: %s returned %s with \"%s\"; expected MLFW_STATUS_INVALID_ARGUMENT naming %s, " \
                      "not %s\n",                                                                           \
              __FILE__, __LINE__, #call, mlfw_status_name(got_), message_, (c_name), (cpp_name));           \
      exit(1);                                                                                              \
    }                                                                                                       \
  } while (0)

static mlfw_dynamic_scaler_config ScalerConfig(void) {
  mlfw_dynamic_scaler_config config;
  CHECK_OK(mlfw_dynamic_scaler_config_default(&config));
  return config;
}

static mlfw_mixed_precision_options LayerOptions(void) {
  mlfw_mixed_precision_options options;
  CHECK_OK(mlfw_mixed_precision_options_default(&options));
  return options;
}

static mlfw_adam_options AdamOptions(void) {
  mlfw_adam_options options;
  CHECK_OK(mlfw_adam_options_default(&options));
  return options;
}

static mlfw_sgd_options SgdOptions(void) {
  mlfw_sgd_options options;
  CHECK_OK(mlfw_sgd_options_default(&options));
  return options;
}

static mlfw_state_options StateOptions(void) {
  mlfw_state_options options;
  CHECK_OK(mlfw_state_options_default(&options));
  return options;
}

static mlfw_delayed_scaling_config DelayedConfig(void) {
  mlfw_delayed_scaling_config config;
  CHECK_OK(mlfw_delayed_scaling_config_default(&config));
  return config;
}

static void DynamicScalerConfig(void) {
  mlfw_grad_scaler_t scaler = NULL;
  mlfw_dynamic_scaler_config config = ScalerConfig();
  config.initial_scale = -1.0f;
  EXPECT_C_NAME(mlfw_grad_scaler_create_dynamic(&config, &scaler), "'config->initial_scale'", "InitialScale");
  config = ScalerConfig();
  config.growth_factor = 1.0f;
  EXPECT_C_NAME(mlfw_grad_scaler_create_dynamic(&config, &scaler), "'config->growth_factor'", "GrowthFactor");
  config = ScalerConfig();
  config.backoff_factor = 1.5f;
  EXPECT_C_NAME(mlfw_grad_scaler_create_dynamic(&config, &scaler), "'config->backoff_factor'", "BackoffFactor");
  config = ScalerConfig();
  config.growth_interval = 0;
  EXPECT_C_NAME(mlfw_grad_scaler_create_dynamic(&config, &scaler), "'config->growth_interval'", "GrowthInterval");
  config = ScalerConfig();
  config.min_scale = 0.0f;
  EXPECT_C_NAME(mlfw_grad_scaler_create_dynamic(&config, &scaler), "'config->min_scale'", "MinScale");
  config = ScalerConfig();
  config.max_scale = INFINITY;
  EXPECT_C_NAME(mlfw_grad_scaler_create_dynamic(&config, &scaler), "'config->max_scale'", "MaxScale");
  config = ScalerConfig();
  config.hysteresis = 0;
  EXPECT_C_NAME(mlfw_grad_scaler_create_dynamic(&config, &scaler), "'config->hysteresis'", "Hysteresis");
  /* The message's text names the other field too, as C names it. */
  config = ScalerConfig();
  config.min_scale = 8.0f;
  config.max_scale = 4.0f;
  config.initial_scale = 4.0f;
  EXPECT_C_NAME(mlfw_grad_scaler_create_dynamic(&config, &scaler), "config->max_scale", "MaxScale");
  CHECK(scaler == NULL);
  EXPECT_C_NAME(mlfw_grad_scaler_create_static(-1.0f, 1, &scaler), "'scale'", "Scale'");
}

static void ConversionLayerOptions(void) {
  mlfw_conversion_layer_t layer = NULL;
  mlfw_mixed_precision_options options = LayerOptions();
  options.precision = (mlfw_precision)9;
  EXPECT_C_NAME(mlfw_conversion_layer_create(&options, &layer), "'options->precision'", "Precision");
  options = LayerOptions();
  options.initial_loss_scale = 0.0f;
  EXPECT_C_NAME(mlfw_conversion_layer_create(&options, &layer), "'options->initial_loss_scale'", "InitialLossScale");
  options = LayerOptions();
  options.growth_factor = 0.5f;
  EXPECT_C_NAME(mlfw_conversion_layer_create(&options, &layer), "'options->growth_factor'", "GrowthFactor");
  options = LayerOptions();
  options.backoff_factor = 0.0f;
  EXPECT_C_NAME(mlfw_conversion_layer_create(&options, &layer), "'options->backoff_factor'", "BackoffFactor");
  options = LayerOptions();
  options.growth_interval = 0;
  EXPECT_C_NAME(mlfw_conversion_layer_create(&options, &layer), "'options->growth_interval'", "GrowthInterval");
  options = LayerOptions();
  options.min_loss_scale = -1.0f;
  EXPECT_C_NAME(mlfw_conversion_layer_create(&options, &layer), "'options->min_loss_scale'", "MinLossScale");
  options = LayerOptions();
  options.max_loss_scale = NAN;
  EXPECT_C_NAME(mlfw_conversion_layer_create(&options, &layer), "'options->max_loss_scale'", "MaxLossScale");
  options = LayerOptions();
  options.max_consecutive_overflows = 0;
  EXPECT_C_NAME(mlfw_conversion_layer_create(&options, &layer), "'options->max_consecutive_overflows'",
                "MaxConsecutiveOverflows");
  options = LayerOptions();
  options.max_grad_norm = NAN;
  EXPECT_C_NAME(mlfw_conversion_layer_create(&options, &layer), "'options->max_grad_norm'", "EnableGradientClipping");
  options = LayerOptions();
  options.precision = MLFW_PRECISION_FLOAT32;
  options.enable_dynamic_loss_scaling = 1;
  EXPECT_C_NAME(mlfw_conversion_layer_create(&options, &layer), "'options->enable_dynamic_loss_scaling'",
                " Precision ");
  /* The advice is the C caller's: no C++ factory. */
  EXPECT_C_NAME(mlfw_conversion_layer_create(&options, &layer), "set options->enable_dynamic_loss_scaling to 0",
                "MixedPrecisionOptions");
  CHECK(layer == NULL);
}

static void OptimizerOptions(void) {
  float weights[2] = {1.0f, 2.0f};
  int64_t shape[1] = {2};
  DLTensor weight = CApiFloat32Vector(weights, shape);
  const char* names[1] = {"w"};
  const DLTensor* parameters[1] = {&weight};
  mlfw_optimizer_t optimizer = NULL;

  mlfw_adam_options adam = AdamOptions();
  adam.learning_rate = 0.0;
  EXPECT_C_NAME(mlfw_adam_create(names, parameters, 1, &adam, &optimizer), "'options->learning_rate'",
                "LearningRate");
  adam = AdamOptions();
  adam.beta1 = 1.0;
  EXPECT_C_NAME(mlfw_adam_create(names, parameters, 1, &adam, &optimizer), "'options->beta1'", "Beta1");
  adam = AdamOptions();
  adam.beta2 = -0.5;
  EXPECT_C_NAME(mlfw_adam_create(names, parameters, 1, &adam, &optimizer), "'options->beta2'", "Beta2");
  adam = AdamOptions();
  adam.epsilon = 0.0;
  EXPECT_C_NAME(mlfw_adam_create(names, parameters, 1, &adam, &optimizer), "'options->epsilon'", "Epsilon");
  adam = AdamOptions();
  adam.weight_decay = -1.0;
  EXPECT_C_NAME(mlfw_adam_create(names, parameters, 1, &adam, &optimizer), "'options->weight_decay'",
                "WeightDecay");

  mlfw_sgd_options sgd = SgdOptions();
  sgd.learning_rate = -1.0;
  EXPECT_C_NAME(mlfw_sgd_create(names, parameters, 1, &sgd, &optimizer), "'options->learning_rate'", "LearningRate");
  sgd = SgdOptions();
  sgd.momentum = 1.5;
  EXPECT_C_NAME(mlfw_sgd_create(names, parameters, 1, &sgd, &optimizer), "'options->momentum'", "Momentum");
  sgd = SgdOptions();
  sgd.weight_decay = -1.0;
  EXPECT_C_NAME(mlfw_sgd_create(names, parameters, 1, &sgd, &optimizer), "'options->weight_decay'", "WeightDecay");
  sgd = SgdOptions();
  sgd.dampening = 2.0;
  EXPECT_C_NAME(mlfw_sgd_create(names, parameters, 1, &sgd, &optimizer), "'options->dampening'", "Dampening");
  sgd = SgdOptions();
  sgd.nesterov = 1;
  EXPECT_C_NAME(mlfw_sgd_create(names, parameters, 1, &sgd, &optimizer), "'options->nesterov'", "Momentum");

  adam = AdamOptions();
  mlfw_state_options states = StateOptions();
  states.block_size = 3;
  EXPECT_C_NAME(mlfw_adam_create_with_states(names, parameters, 1, &adam, &states, &optimizer),
                "'states->block_size'", "StateBlockSize");
  states = StateOptions();
  states.first = MLFW_STATE_UINT8_BLOCK;
  EXPECT_C_NAME(mlfw_adam_create_with_states(names, parameters, 1, &adam, &states, &optimizer), "'states->first'",
                "FirstMomentFormat");
  states = StateOptions();
  states.second = MLFW_STATE_INT8_BLOCK;
  EXPECT_C_NAME(mlfw_adam_create_with_states(names, parameters, 1, &adam, &states, &optimizer), "'states->second'",
                "SecondMomentFormat");
  states = StateOptions();
  states.first = (mlfw_state_format)42;
  EXPECT_C_NAME(mlfw_adam_create_with_states(names, parameters, 1, &adam, &states, &optimizer), "'states->first'",
                "states.first");
  states = StateOptions();
  states.masters = (mlfw_master_format)42;
  EXPECT_C_NAME(mlfw_adam_create_with_states(names, parameters, 1, &adam, &states, &optimizer), "'states->masters'",
                "states.masters");
  sgd = SgdOptions();
  sgd.momentum = 0.9;
  states = StateOptions();
  states.first = MLFW_STATE_UINT8_BLOCK;
  EXPECT_C_NAME(mlfw_sgd_create_with_states(names, parameters, 1, &sgd, &states, &optimizer), "'states->first'",
                "MomentumFormat");
  states = StateOptions();
  states.second = MLFW_STATE_BFLOAT16;
  EXPECT_C_NAME(mlfw_sgd_create_with_states(names, parameters, 1, &sgd, &states, &optimizer), "'states->second'",
                "states.second");
  CHECK(optimizer == NULL);

  /* A scalar argument, and the fused steps' options. */
  adam = AdamOptions();
  CHECK_OK(mlfw_adam_create(names, parameters, 1, &adam, &optimizer));
  EXPECT_C_NAME(mlfw_optimizer_set_learning_rate(optimizer, -1.0), "'learning_rate'", "LearningRate");
  mlfw_optimizer_destroy(optimizer);

  float grads[2] = {0.5f, 0.5f};
  float exp_avg[2] = {0.0f, 0.0f};
  float exp_avg_sq[2] = {0.0f, 0.0f};
  DLTensor gradient = CApiFloat32Vector(grads, shape);
  DLTensor first = CApiFloat32Vector(exp_avg, shape);
  DLTensor second = CApiFloat32Vector(exp_avg_sq, shape);
  const DLTensor* gradients[1] = {&gradient};
  const DLTensor* firsts[1] = {&first};
  const DLTensor* seconds[1] = {&second};
  adam.epsilon = -1.0;
  EXPECT_C_NAME(mlfw_fused_adam_step(parameters, gradients, firsts, seconds, 1, &adam, 1, NULL), "'options->epsilon'",
                "Epsilon");
  sgd = SgdOptions();
  sgd.learning_rate = 0.0;
  EXPECT_C_NAME(mlfw_fused_sgd_step(parameters, gradients, NULL, 1, &sgd, 1, NULL), "'options->learning_rate'",
                "LearningRate");
}

static void Float8Configs(void) {
  mlfw_fp8_recipe_t recipe = NULL;
  mlfw_delayed_scaling_config config = DelayedConfig();
  config.amax_history_len = 0;
  EXPECT_C_NAME(mlfw_delayed_scaling_create(&config, &recipe), "'config->amax_history_len'", "AmaxHistoryLen");
  config = DelayedConfig();
  config.margin = -1;
  EXPECT_C_NAME(mlfw_delayed_scaling_create(&config, &recipe), "'config->margin'", "Margin");
  config = DelayedConfig();
  config.fp8_format = (mlfw_fp8_recipe_format)7;
  EXPECT_C_NAME(mlfw_delayed_scaling_create(&config, &recipe), "'config->fp8_format'", "Fp8Format");
  config = DelayedConfig();
  config.amax_compute_algo = (mlfw_amax_compute_algo)7;
  EXPECT_C_NAME(mlfw_delayed_scaling_create(&config, &recipe), "'config->amax_compute_algo'", "AmaxComputeAlgo");
  EXPECT_C_NAME(mlfw_current_scaling_create((mlfw_fp8_recipe_format)7, &recipe), "'fp8_format'", "Fp8Format");
  CHECK(recipe == NULL);
}

int main(void) {
  DynamicScalerConfig();
  ConversionLayerOptions();
  OptimizerOptions();
  Float8Configs();
  printf("c api settings errors ok\n");
  return 0;
}
