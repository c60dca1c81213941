/// @file optimizers.h
/// @brief C API: Adam, AdamW and SGD with FP32 master weights, over DLPack tensors.
#ifndef MLFRAMEWORK_C_OPTIMIZERS_H_
#define MLFRAMEWORK_C_OPTIMIZERS_H_

// C declarations, for C compilers: C's typedefs and headers, and the C API's mlfw_ names.
// NOLINTBEGIN(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#include <mlframework/c/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/// An optimizer (C++ optimizers::Adam or optimizers::SGD) over the caller's parameters.
typedef struct mlfw_optimizer* mlfw_optimizer_t;

/// Adam's and AdamW's settings (C++ AdamOptions). mlfw_adam_options_default() fills the defaults.
typedef struct mlfw_adam_options {
  double learning_rate;        ///< Step size (> 0, finite); default 1e-3.
  double beta1;                ///< First-moment decay in [0, 1); default 0.9.
  double beta2;                ///< Second-moment decay in [0, 1); default 0.999.
  double epsilon;              ///< Denominator term (> 0); default 1e-8.
  double weight_decay;         ///< Weight decay (>= 0); default 0.
  int decoupled_weight_decay;  ///< Non-zero: AdamW (decay applied to the weights); default 0.
} mlfw_adam_options;

/// SGD's settings (C++ SGDOptions). mlfw_sgd_options_default() fills the defaults.
typedef struct mlfw_sgd_options {
  double learning_rate;  ///< Step size (> 0, finite); default 0.01.
  double momentum;       ///< Momentum factor in [0, 1); default 0.
  double weight_decay;   ///< L2 penalty added to the gradient (>= 0); default 0.
  double dampening;      ///< Dampening of the gradient in the momentum buffer, in [0, 1]; default 0.
  int nesterov;          ///< Non-zero: Nesterov momentum (needs momentum > 0, dampening 0); default 0.
} mlfw_sgd_options;

/// How an optimizer stores a state vector (C++ StateFormat; docs/optimizers.md, "Fewer bytes per
/// parameter"). Since API version 2.
typedef enum mlfw_state_format {
  MLFW_STATE_FLOAT32 = 0,            ///< FP32: PyTorch's bits (the default).
  MLFW_STATE_BFLOAT16 = 1,           ///< BF16, round to nearest even.
  MLFW_STATE_FLOAT16 = 2,            ///< FP16 codes with one power-of-two FP32 scale per block.
  MLFW_STATE_INT8_BLOCK = 3,         ///< Signed linear 8-bit codes, one FP32 scale per block (first moment, momentum).
  MLFW_STATE_UINT8_BLOCK = 4,        ///< Unsigned linear 8-bit codes, one FP32 scale per block (second moment).
  MLFW_STATE_FLOAT8_E4M3_BLOCK = 5,  ///< FP8 E4M3FN codes with one FP32 scale per block.
} mlfw_state_format;

/// How an optimizer keeps the master weights (C++ MasterFormat). Since API version 2.
typedef enum mlfw_master_format {
  MLFW_MASTERS_FLOAT32 = 0,                       ///< FP32 masters (the default).
  MLFW_MASTERS_BFLOAT16_STOCHASTIC_ROUNDING = 1,  ///< The BF16 parameters, rounded stochastically (Philox).
  MLFW_MASTERS_BFLOAT16_REMAINDER = 2,            ///< The BF16 parameters and 16-bit remainders: exact FP32 masters.
} mlfw_master_format;

/// The formats of an optimizer's state and masters (C++ AdamOptions::FirstMomentFormat,
/// SecondMomentFormat, StateBlockSize, Masters, RoundingSeed; SGDOptions::MomentumFormat and
/// the same others). mlfw_state_options_default() fills the defaults: FP32 state and masters,
/// blocks of 256. Since API version 2.
typedef struct mlfw_state_options {
  mlfw_state_format first;     ///< Adam's exp_avg, SGD's momentum buffer (not MLFW_STATE_UINT8_BLOCK).
  mlfw_state_format second;    ///< Adam's exp_avg_sq (not MLFW_STATE_INT8_BLOCK); MLFW_STATE_FLOAT32 for SGD.
  size_t block_size;           ///< Elements per block of the block-scaled formats: a power of two from 32 to 2048.
  mlfw_master_format masters;  ///< The BF16 formats need BF16 parameters in host (kDLCPU) memory.
  uint64_t rounding_seed;      ///< MLFW_MASTERS_BFLOAT16_STOCHASTIC_ROUNDING: the Philox key.
} mlfw_state_options;

/// Fills @p options with AdamOptions' defaults (Adam, not AdamW). MLFW_STATUS_NULL_ARGUMENT for null.
MLFW_C_API mlfw_status mlfw_adam_options_default(mlfw_adam_options* options);
/// Fills @p options with SGDOptions' defaults. MLFW_STATUS_NULL_ARGUMENT for null.
MLFW_C_API mlfw_status mlfw_sgd_options_default(mlfw_sgd_options* options);

/// Creates Adam (or AdamW, when options->decoupled_weight_decay) over @p count parameters: the
/// tensors @p parameters[i] named @p names[i] (unique, as the C++ GradientMap's keys). The
/// tensors are borrowed: their memory must stay valid until mlfw_optimizer_destroy(); FP16/BF16
/// parameters get FP32 master weights kept by the optimizer, which the step rounds back into
/// them. Tensors: kDLCPU or kDLCUDA, float32/float16/bfloat16, compact row-major (or null
/// strides). On success *@p out holds the new handle; on failure it is not written.
MLFW_C_API mlfw_status mlfw_adam_create(const char* const* names, const DLTensor* const* parameters, size_t count,
                                        const mlfw_adam_options* options, mlfw_optimizer_t* out);
/// Creates SGD over @p count named parameters (see mlfw_adam_create() for the arguments).
MLFW_C_API mlfw_status mlfw_sgd_create(const char* const* names, const DLTensor* const* parameters, size_t count,
                                       const mlfw_sgd_options* options, mlfw_optimizer_t* out);
/// Fills @p options with the default state formats (FP32 state and masters, blocks of 256).
/// MLFW_STATUS_NULL_ARGUMENT for null. Since API version 2.
MLFW_C_API mlfw_status mlfw_state_options_default(mlfw_state_options* options);
/// mlfw_adam_create() with the state and masters kept as @p states says (C++ Adam with those
/// AdamOptions fields): for example 8-bit moments and BF16 masters with stochastic rounding, 4.03
/// bytes per parameter instead of 12. MLFW_STATUS_INVALID_ARGUMENT naming the field and its value
/// for a value outside an enum, a block size that is not a power of two from 32 to 2048,
/// MLFW_STATE_UINT8_BLOCK for `first` or MLFW_STATE_INT8_BLOCK for `second`, or BF16 masters
/// over a parameter that is not BF16 in host memory. Since API version 2.
MLFW_C_API mlfw_status mlfw_adam_create_with_states(const char* const* names, const DLTensor* const* parameters,
                                                    size_t count, const mlfw_adam_options* options,
                                                    const mlfw_state_options* states, mlfw_optimizer_t* out);
/// mlfw_sgd_create() with the momentum buffers and masters kept as @p states says (`first` is the
/// momentum's format; `second` must be MLFW_STATE_FLOAT32). Errors as
/// mlfw_adam_create_with_states(). Since API version 2.
MLFW_C_API mlfw_status mlfw_sgd_create_with_states(const char* const* names, const DLTensor* const* parameters,
                                                   size_t count, const mlfw_sgd_options* options,
                                                   const mlfw_state_options* states, mlfw_optimizer_t* out);
/// Destroys @p optimizer (null is accepted and does nothing).
MLFW_C_API void mlfw_optimizer_destroy(mlfw_optimizer_t optimizer);

/// Hands the optimizer this iteration's gradients (C++ SetGradients): @p gradients[i] is the
/// gradient of the parameter @p names[i], with its shape; FP16/BF16/FP32 (FP32 master gradients
/// of FP16 parameters are accepted). Borrowed until the next mlfw_optimizer_set_gradients() or
/// mlfw_optimizer_destroy(). A framework that keeps its gradient buffers may pass the same
/// tensors every iteration; the handle then reuses its views of them.
MLFW_C_API mlfw_status mlfw_optimizer_set_gradients(mlfw_optimizer_t optimizer, const char* const* names,
                                                    const DLTensor* const* gradients, size_t count);
/// One optimizer step with the gradients set (C++ Step()), without loss scaling. @p stream: a
/// `cudaStream_t` to order the step after (C++ StreamGuard) when the parameters are on a CUDA
/// device, or NULL for none (the library's own stream). A non-null stream with CPU parameters is
/// MLFW_STATUS_INVALID_ARGUMENT.
MLFW_C_API mlfw_status mlfw_optimizer_step(mlfw_optimizer_t optimizer, void* stream);
/// Sets the learning rate (> 0, finite).
MLFW_C_API mlfw_status mlfw_optimizer_set_learning_rate(mlfw_optimizer_t optimizer, double learning_rate);
/// Writes the number of steps taken into *@p steps.
MLFW_C_API mlfw_status mlfw_optimizer_step_count(mlfw_optimizer_t optimizer, int64_t* steps);

/// One fused Adam/AdamW step over lists of @p count FP32 tensors you keep yourself (C++
/// optimizers::FusedAdamStep; the arithmetic of mlfw_adam_create()'s optimizer and of
/// torch.optim.Adam): @p parameters updated in place from @p gradients, @p exp_avg and
/// @p exp_avg_sq (zero before the first step) updated. @p step is this step's number (1 for the
/// first; the bias corrections). The lists are borrowed for the call; @p stream as in
/// mlfw_optimizer_step(). Errors name the list and the element; nothing is written on failure.
/// A tensor the step writes (a parameter or a moment) over memory another tensor of the call uses
/// (a parameter listed twice, an exp_avg over its parameter) is MLFW_STATUS_INVALID_ARGUMENT naming
/// both (`exp_avg[0]`, `parameters[0]`); one gradient may be given for two parameters.
MLFW_C_API mlfw_status mlfw_fused_adam_step(const DLTensor* const* parameters, const DLTensor* const* gradients,
                                            const DLTensor* const* exp_avg, const DLTensor* const* exp_avg_sq,
                                            size_t count, const mlfw_adam_options* options, int64_t step, void* stream);
/// One fused SGD step (C++ optimizers::FusedSGDStep): @p momentum_buffers (one per parameter,
/// FP32) when options->momentum > 0, else NULL; @p first_step non-zero on the first step (the
/// buffers then start as the step's gradient, as in torch.optim.SGD). Errors as
/// mlfw_fused_adam_step()'s (a momentum buffer over another tensor's memory, say).
MLFW_C_API mlfw_status mlfw_fused_sgd_step(const DLTensor* const* parameters, const DLTensor* const* gradients,
                                           const DLTensor* const* momentum_buffers, size_t count,
                                           const mlfw_sgd_options* options, int first_step, void* stream);

/// The optimizer's state (C++ StateDict(): options, step count, masters and moments) as bytes.
/// With @p buffer NULL, writes the size into *@p size and nothing else; otherwise @p capacity
/// must be at least that size (MLFW_STATUS_INVALID_ARGUMENT naming it otherwise) and *@p size
/// receives the bytes written.
MLFW_C_API mlfw_status mlfw_optimizer_state_dict(mlfw_optimizer_t optimizer, void* buffer, size_t capacity,
                                                 size_t* size);
/// Restores bytes from mlfw_optimizer_state_dict() of an optimizer of the same kind over the
/// same parameter names and shapes. MLFW_STATUS_INVALID_ARGUMENT for a truncated, corrupted or
/// foreign blob; the optimizer is unchanged then.
MLFW_C_API mlfw_status mlfw_optimizer_load_state_dict(mlfw_optimizer_t optimizer, const void* data, size_t size);

#ifdef __cplusplus
}
#endif

// NOLINTEND(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#endif  // MLFRAMEWORK_C_OPTIMIZERS_H_
