/* The C ABI's public structs and enums, pinned: the size, alignment and field offsets of every
 * struct a caller allocates or reads, and the value of every enumerator, as recorded for the
 * LP64 Linux ABIs (x86-64, AArch64). A change to any of them breaks every program compiled
 * against an older header, so it fails to compile here: such a change needs a new SONAME
 * (docs/c-api.md, "ABI stability"), and its new layout recorded below. The DLPack structs the
 * API takes are pinned too: the library reads them with the layout of the dlpack.h it was built
 * with, which C callers share. */
#include <stddef.h>

#include "CApiCheck.h"

#define PIN_VALUE(enumerator, value) _Static_assert((enumerator) == (value), #enumerator " changed value")
#define PIN_ENUM(type) _Static_assert(sizeof(type) == sizeof(int) && _Alignof(type) == _Alignof(int), #type " is not int-sized")

#if defined(__LP64__) && defined(__linux__)
#define PIN_SIZE(type, size, align) \
  _Static_assert(sizeof(type) == (size) && _Alignof(type) == (align), "the size or alignment of " #type " changed")
#define PIN_FIELD(type, field, offset) \
  _Static_assert(offsetof(type, field) == (offset), "the offset of " #type "." #field " changed")
#else
/* Another ABI: the offsets differ, only the enums are pinned. */
#define PIN_SIZE(type, size, align) _Static_assert(1, "")
#define PIN_FIELD(type, field, offset) _Static_assert(1, "")
#endif

/* Enumerators. */
PIN_VALUE(MLFW_PRECISION_FLOAT32, 0);
PIN_VALUE(MLFW_PRECISION_FLOAT16, 1);
PIN_VALUE(MLFW_PRECISION_BFLOAT16, 2);
PIN_VALUE(MLFW_FP8_E4M3, 0);
PIN_VALUE(MLFW_FP8_E5M2, 1);
PIN_VALUE(MLFW_FP8_RECIPE_E4M3, 0);
PIN_VALUE(MLFW_FP8_RECIPE_HYBRID, 1);
PIN_VALUE(MLFW_FP8_FORWARD, 0);
PIN_VALUE(MLFW_FP8_GRADIENT, 1);
PIN_VALUE(MLFW_AMAX_MAX, 0);
PIN_VALUE(MLFW_AMAX_MOST_RECENT, 1);
PIN_VALUE(MLFW_STEP_AND_UPDATE, 0);
PIN_VALUE(MLFW_STEP_DEFER_UPDATE, 1);
PIN_VALUE(MLFW_STEP_DEFER_STEP_AND_UPDATE, 2);
PIN_VALUE(MLFW_STATE_FLOAT32, 0);
PIN_VALUE(MLFW_STATE_BFLOAT16, 1);
PIN_VALUE(MLFW_STATE_FLOAT16, 2);
PIN_VALUE(MLFW_STATE_INT8_BLOCK, 3);
PIN_VALUE(MLFW_STATE_UINT8_BLOCK, 4);
PIN_VALUE(MLFW_STATE_FLOAT8_E4M3_BLOCK, 5);
PIN_VALUE(MLFW_MASTERS_FLOAT32, 0);
PIN_VALUE(MLFW_MASTERS_BFLOAT16_STOCHASTIC_ROUNDING, 1);
PIN_VALUE(MLFW_MASTERS_BFLOAT16_REMAINDER, 2);
PIN_VALUE(MLFW_STATUS_OK, 0);
PIN_VALUE(MLFW_STATUS_INVALID_ARGUMENT, 1);
PIN_VALUE(MLFW_STATUS_NULL_ARGUMENT, 2);
PIN_VALUE(MLFW_STATUS_INVALID_OPERATION, 3);
PIN_VALUE(MLFW_STATUS_BACKEND_ERROR, 4);
PIN_VALUE(MLFW_STATUS_COMMUNICATION_ERROR, 5);
PIN_VALUE(MLFW_STATUS_OUT_OF_MEMORY, 6);
PIN_VALUE(MLFW_STATUS_INTERNAL_ERROR, 7);
PIN_VALUE(MLFW_STATUS_CALLBACK_ERROR, 8);

/* mlfw_mixed_precision_options */
PIN_SIZE(mlfw_mixed_precision_options, 48, 4);
PIN_FIELD(mlfw_mixed_precision_options, precision, 0);
PIN_FIELD(mlfw_mixed_precision_options, enable_dynamic_loss_scaling, 4);
PIN_FIELD(mlfw_mixed_precision_options, initial_loss_scale, 8);
PIN_FIELD(mlfw_mixed_precision_options, growth_factor, 12);
PIN_FIELD(mlfw_mixed_precision_options, backoff_factor, 16);
PIN_FIELD(mlfw_mixed_precision_options, growth_interval, 20);
PIN_FIELD(mlfw_mixed_precision_options, min_loss_scale, 24);
PIN_FIELD(mlfw_mixed_precision_options, max_loss_scale, 28);
PIN_FIELD(mlfw_mixed_precision_options, max_consecutive_overflows, 32);
PIN_FIELD(mlfw_mixed_precision_options, enable_gradient_clipping, 36);
PIN_FIELD(mlfw_mixed_precision_options, max_grad_norm, 40);
PIN_FIELD(mlfw_mixed_precision_options, enable_auto_fallback, 44);

/* mlfw_conversion_stats */
PIN_SIZE(mlfw_conversion_stats, 48, 8);
PIN_FIELD(mlfw_conversion_stats, loss_scale, 0);
PIN_FIELD(mlfw_conversion_stats, clip_count, 8);
PIN_FIELD(mlfw_conversion_stats, last_gradient_norm, 16);
PIN_FIELD(mlfw_conversion_stats, fell_back_to_fp32, 20);
PIN_FIELD(mlfw_conversion_stats, fallback_step, 24);
PIN_FIELD(mlfw_conversion_stats, overflows_at_min_scale, 32);
PIN_FIELD(mlfw_conversion_stats, total_overflows, 40);

/* mlfw_delayed_scaling_config */
PIN_SIZE(mlfw_delayed_scaling_config, 24, 8);
PIN_FIELD(mlfw_delayed_scaling_config, margin, 0);
PIN_FIELD(mlfw_delayed_scaling_config, fp8_format, 4);
PIN_FIELD(mlfw_delayed_scaling_config, amax_history_len, 8);
PIN_FIELD(mlfw_delayed_scaling_config, amax_compute_algo, 16);

/* mlfw_dynamic_scaler_config */
PIN_SIZE(mlfw_dynamic_scaler_config, 32, 4);
PIN_FIELD(mlfw_dynamic_scaler_config, initial_scale, 0);
PIN_FIELD(mlfw_dynamic_scaler_config, growth_factor, 4);
PIN_FIELD(mlfw_dynamic_scaler_config, backoff_factor, 8);
PIN_FIELD(mlfw_dynamic_scaler_config, growth_interval, 12);
PIN_FIELD(mlfw_dynamic_scaler_config, min_scale, 16);
PIN_FIELD(mlfw_dynamic_scaler_config, max_scale, 20);
PIN_FIELD(mlfw_dynamic_scaler_config, hysteresis, 24);
PIN_FIELD(mlfw_dynamic_scaler_config, enabled, 28);

/* mlfw_scaler_stats */
PIN_SIZE(mlfw_scaler_stats, 72, 8);
PIN_FIELD(mlfw_scaler_stats, current_scale, 0);
PIN_FIELD(mlfw_scaler_stats, steps_since_last_overflow, 8);
PIN_FIELD(mlfw_scaler_stats, consecutive_overflows, 16);
PIN_FIELD(mlfw_scaler_stats, total_overflows, 24);
PIN_FIELD(mlfw_scaler_stats, total_steps, 32);
PIN_FIELD(mlfw_scaler_stats, skipped_steps, 40);
PIN_FIELD(mlfw_scaler_stats, successful_steps, 48);
PIN_FIELD(mlfw_scaler_stats, min_scale, 56);
PIN_FIELD(mlfw_scaler_stats, max_scale, 60);
PIN_FIELD(mlfw_scaler_stats, growth_interval, 64);

/* mlfw_scale_policy */
PIN_SIZE(mlfw_scale_policy, 24, 8);
PIN_FIELD(mlfw_scale_policy, scale, 0);
PIN_FIELD(mlfw_scale_policy, update, 8);
PIN_FIELD(mlfw_scale_policy, reset, 16);

/* mlfw_step_event */
PIN_SIZE(mlfw_step_event, 48, 8);
PIN_FIELD(mlfw_step_event, step, 0);
PIN_FIELD(mlfw_step_event, loss_scale, 8);
PIN_FIELD(mlfw_step_event, new_loss_scale, 12);
PIN_FIELD(mlfw_step_event, skipped, 16);
PIN_FIELD(mlfw_step_event, has_gradient_amax, 20);
PIN_FIELD(mlfw_step_event, gradient_amax, 24);
PIN_FIELD(mlfw_step_event, overflowed_tensors, 32);
PIN_FIELD(mlfw_step_event, overflow_report, 40);

/* mlfw_adam_options */
PIN_SIZE(mlfw_adam_options, 48, 8);
PIN_FIELD(mlfw_adam_options, learning_rate, 0);
PIN_FIELD(mlfw_adam_options, beta1, 8);
PIN_FIELD(mlfw_adam_options, beta2, 16);
PIN_FIELD(mlfw_adam_options, epsilon, 24);
PIN_FIELD(mlfw_adam_options, weight_decay, 32);
PIN_FIELD(mlfw_adam_options, decoupled_weight_decay, 40);

/* mlfw_sgd_options */
PIN_SIZE(mlfw_sgd_options, 40, 8);
PIN_FIELD(mlfw_sgd_options, learning_rate, 0);
PIN_FIELD(mlfw_sgd_options, momentum, 8);
PIN_FIELD(mlfw_sgd_options, weight_decay, 16);
PIN_FIELD(mlfw_sgd_options, dampening, 24);
PIN_FIELD(mlfw_sgd_options, nesterov, 32);

/* mlfw_state_options */
PIN_SIZE(mlfw_state_options, 32, 8);
PIN_FIELD(mlfw_state_options, first, 0);
PIN_FIELD(mlfw_state_options, second, 4);
PIN_FIELD(mlfw_state_options, block_size, 8);
PIN_FIELD(mlfw_state_options, masters, 16);
PIN_FIELD(mlfw_state_options, rounding_seed, 24);

/* DLTensor */
PIN_SIZE(DLTensor, 48, 8);
PIN_FIELD(DLTensor, data, 0);
PIN_FIELD(DLTensor, device, 8);
PIN_FIELD(DLTensor, ndim, 16);
PIN_FIELD(DLTensor, dtype, 20);
PIN_FIELD(DLTensor, shape, 24);
PIN_FIELD(DLTensor, strides, 32);
PIN_FIELD(DLTensor, byte_offset, 40);

/* DLManagedTensor */
PIN_SIZE(DLManagedTensor, 64, 8);
PIN_FIELD(DLManagedTensor, dl_tensor, 0);
PIN_FIELD(DLManagedTensor, manager_ctx, 48);
PIN_FIELD(DLManagedTensor, deleter, 56);
PIN_ENUM(mlfw_status);
PIN_ENUM(mlfw_precision);
PIN_ENUM(mlfw_step_mode);
PIN_ENUM(mlfw_fp8_format);
PIN_ENUM(mlfw_fp8_recipe_format);
PIN_ENUM(mlfw_fp8_tensor_role);
PIN_ENUM(mlfw_amax_compute_algo);
PIN_ENUM(mlfw_state_format);
PIN_ENUM(mlfw_master_format);

int main(void) {
  /* The library this program runs against speaks the version of the header it was compiled with. */
  if (mlfw_api_version() != MLFW_C_API_VERSION) {
    fprintf(stderr, "mlfw_api_version() is %d, the header's MLFW_C_API_VERSION %d\n", mlfw_api_version(),
            MLFW_C_API_VERSION);
    return 1;
  }
  printf("c api abi layout ok\n");
  return 0;
}
