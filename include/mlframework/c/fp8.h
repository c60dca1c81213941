/// @file fp8.h
/// @brief C API: FP8 casts over lists of DLPack tensors and the FP8 scaling recipes (C++
/// core/Float8Cast.hpp, fp8/DelayedScaling.hpp, fp8/CurrentScaling.hpp).
///
/// FP8 values cross the boundary as their bytes: a `DLTensor` of dtype uint8 (code kDLUInt,
/// 8 bits, one lane), compact row-major, one byte per element, with the format given beside it
/// (mlfw_fp8_format). DLPack 0.6 (Debian's `dlpack.h`) has no FP8 type code; frameworks export
/// FP8 storage as uint8 (torch: `t.view(torch.uint8)`). The other tensors are float32, float16
/// or bfloat16, as in multi_tensor.h. @p stream: a `cudaStream_t` to order the work after when
/// the tensors are on a CUDA device, or NULL; non-null with CPU tensors is
/// MLFW_STATUS_INVALID_ARGUMENT. Errors name the argument and the element
/// (`dst[1]->dtype`); nothing is written on failure.
#ifndef MLFRAMEWORK_C_FP8_H_
#define MLFRAMEWORK_C_FP8_H_

// C declarations, for C compilers: C's typedefs and headers, and the C API's mlfw_ names.
// NOLINTBEGIN(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#include <stddef.h>

#include <dlpack/dlpack.h>

#include <mlframework/c/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/// The encoding of FP8 bytes.
typedef enum mlfw_fp8_format {
  MLFW_FP8_E4M3 = 0, /**< E4M3FN: 4 exponent bits, 3 mantissa bits, no infinities (max 448). */
  MLFW_FP8_E5M2 = 1, /**< E5M2: 5 exponent bits, 2 mantissa bits (max 57344). */
} mlfw_fp8_format;

/// `amax[i] = max |tensors[i]|` (NaN propagates) into @p amax, a float32 tensor of @p count
/// elements on the tensors' device (C++ Amax).
MLFW_C_API mlfw_status mlfw_fp8_amax(const DLTensor* const* tensors, size_t count, const DLTensor* amax, void* stream);
/// `dst[i] = saturate_to_fp8(src[i] * scale[i])` in @p format (@p dst: uint8 bytes, shapes
/// pairwise equal), and `amax[i] = max |src[i]|` when @p amax is not NULL; @p scale and @p amax
/// are float32 tensors of @p count elements on the tensors' device (C++ ScaledCastToFloat8: one
/// pass, bit-identical on the CPU and CUDA and to Transformer Engine's cast).
MLFW_C_API mlfw_status mlfw_fp8_scaled_cast(const DLTensor* const* src, const DLTensor* const* dst, size_t count,
                                            mlfw_fp8_format format, const DLTensor* scale, const DLTensor* amax,
                                            void* stream);
/// `dst[i] = round_to_dst(float(src[i]) * scale_inv[i])` from FP8 bytes in @p format into
/// float32, float16 or bfloat16 tensors (C++ DequantizeFloat8); @p scale_inv: float32, @p count
/// elements.
MLFW_C_API mlfw_status mlfw_fp8_dequantize(const DLTensor* const* src, mlfw_fp8_format format,
                                           const DLTensor* const* dst, size_t count, const DLTensor* scale_inv,
                                           void* stream);

/// Which FP8 format a recipe gives its tensors (C++ fp8::Format).
typedef enum mlfw_fp8_recipe_format {
  MLFW_FP8_RECIPE_E4M3 = 0,   /**< E4M3 for every tensor. */
  MLFW_FP8_RECIPE_HYBRID = 1, /**< E4M3 for the forward pass, E5M2 for gradients. */
} mlfw_fp8_recipe_format;

/// What a registered tensor is (C++ fp8::TensorRole): picks its format under HYBRID.
typedef enum mlfw_fp8_tensor_role {
  MLFW_FP8_FORWARD = 0,  /**< A weight or an activation of the forward pass. */
  MLFW_FP8_GRADIENT = 1, /**< A gradient of the backward pass. */
} mlfw_fp8_tensor_role;

/// How delayed scaling reads its amax history (C++ fp8::AmaxComputeAlgorithm).
typedef enum mlfw_amax_compute_algo {
  MLFW_AMAX_MAX = 0,         /**< The largest entry of the history. */
  MLFW_AMAX_MOST_RECENT = 1, /**< The amax of the step just ended. */
} mlfw_amax_compute_algo;

/// Transformer Engine's DelayedScaling settings (C++ fp8::DelayedScalingConfig).
typedef struct mlfw_delayed_scaling_config {
  int margin;                               /**< scale = (fp8_max / amax) / 2^margin. */
  mlfw_fp8_recipe_format fp8_format;        /**< E4M3 or HYBRID. */
  size_t amax_history_len;                  /**< Steps of amax kept (at least 1). */
  mlfw_amax_compute_algo amax_compute_algo; /**< Max or most recent. */
} mlfw_delayed_scaling_config;

/// An FP8 scaling recipe: the scales, inverse scales and amax of the tensors registered with it.
typedef struct mlfw_fp8_recipe* mlfw_fp8_recipe_t;

/// The C++ defaults (margin 0, HYBRID, 1024 steps of history, max) into *@p config.
MLFW_C_API mlfw_status mlfw_delayed_scaling_config_default(mlfw_delayed_scaling_config* config);
/// A delayed-scaling recipe (C++ fp8::DelayedScaling): each cast uses the scale computed from
/// earlier steps' amax, which mlfw_fp8_recipe_update_scales() advances.
MLFW_C_API mlfw_status mlfw_delayed_scaling_create(const mlfw_delayed_scaling_config* config, mlfw_fp8_recipe_t* out);
/// A current-scaling recipe (C++ fp8::CurrentScaling): each cast first takes its inputs' amax.
MLFW_C_API mlfw_status mlfw_current_scaling_create(mlfw_fp8_recipe_format fp8_format, mlfw_fp8_recipe_t* out);
/// Frees @p recipe (NULL is allowed).
MLFW_C_API void mlfw_fp8_recipe_destroy(mlfw_fp8_recipe_t recipe);

/// Registers the tensor @p name as @p role, its state on the device of @p like (a float32,
/// float16 or bfloat16 tensor of the values it will cast).
MLFW_C_API mlfw_status mlfw_fp8_recipe_register(mlfw_fp8_recipe_t recipe, const char* name, mlfw_fp8_tensor_role role,
                                                const DLTensor* like);
/// The FP8 format the recipe gives the registered tensor @p name into *@p format.
MLFW_C_API mlfw_status mlfw_fp8_recipe_format_of(mlfw_fp8_recipe_t recipe, const char* name, mlfw_fp8_format* format);
/// Casts `src[i]` into the FP8 bytes `dst[i]` with the scale of the registered tensor
/// `names[i]`, in its format, recording its amax (C++ IScalingRecipe::Quantize).
MLFW_C_API mlfw_status mlfw_fp8_recipe_quantize(mlfw_fp8_recipe_t recipe, const char* const* names,
                                                const DLTensor* const* src, const DLTensor* const* dst, size_t count,
                                                void* stream);
/// Decodes the FP8 bytes `src[i]` of the registered tensor `names[i]` into `dst[i]` with its
/// inverse scale (C++ IScalingRecipe::Dequantize).
MLFW_C_API mlfw_status mlfw_fp8_recipe_dequantize(mlfw_fp8_recipe_t recipe, const char* const* names,
                                                  const DLTensor* const* src, const DLTensor* const* dst, size_t count,
                                                  void* stream);
/// Advances every registered tensor's scale from its amax (delayed scaling's step end; current
/// scaling has nothing to advance). @p stream as above, for the recipe's CUDA state, whatever
/// other (CPU) tensors are registered; MLFW_STATUS_INVALID_ARGUMENT naming `stream` when the
/// recipe has tensors on two CUDA devices, which one stream cannot order (pass NULL).
MLFW_C_API mlfw_status mlfw_fp8_recipe_update_scales(mlfw_fp8_recipe_t recipe, void* stream);
/// The scale, inverse scale and current amax of the registered tensor @p name (each pointer may
/// be NULL). A device state is read back: the call waits for the device.
MLFW_C_API mlfw_status mlfw_fp8_recipe_scale(mlfw_fp8_recipe_t recipe, const char* name, float* scale, float* scale_inv,
                                             float* amax);
/// The recipe's state (C++ StateDict) into @p buffer of @p capacity bytes, its size into *@p size;
/// with a NULL @p buffer only the size.
MLFW_C_API mlfw_status mlfw_fp8_recipe_state_dict(mlfw_fp8_recipe_t recipe, void* buffer, size_t capacity,
                                                  size_t* size);
/// Restores a state saved by mlfw_fp8_recipe_state_dict() (C++ LoadStateDict); a blob of another
/// recipe, or a truncated or altered one, is refused and the recipe is left as it was.
MLFW_C_API mlfw_status mlfw_fp8_recipe_load_state_dict(mlfw_fp8_recipe_t recipe, const void* data, size_t size);

#ifdef __cplusplus
}
#endif

// NOLINTEND(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#endif  // MLFRAMEWORK_C_FP8_H_
