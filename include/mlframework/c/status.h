/// @file status.h
/// @brief C API: status codes, the thread-local error message and the export macro.
#ifndef MLFRAMEWORK_C_STATUS_H_
#define MLFRAMEWORK_C_STATUS_H_

// C declarations, for C compilers: C's typedefs and headers, and the C API's mlfw_ names.
// NOLINTBEGIN(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

/// Marks a function of libmlframework_c's interface (the only symbols the library exports).
#define MLFW_C_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

/// What a call of the C API returned. Every function that can fail returns one; on anything but
/// MLFW_STATUS_OK, mlfw_last_error() holds the message and every handle the call was given is as
/// it was before the call. The values are part of the ABI: new codes may be added, existing ones
/// keep their numbers.
typedef enum mlfw_status {
  MLFW_STATUS_OK = 0,                   ///< Success.
  MLFW_STATUS_INVALID_ARGUMENT = 1,     ///< An argument has an invalid value (C++ ArgumentError).
  MLFW_STATUS_NULL_ARGUMENT = 2,        ///< A required pointer is null (C++ ArgumentNullError).
  MLFW_STATUS_INVALID_OPERATION = 3,    ///< Not valid in the handle's current state (InvalidOperationError).
  MLFW_STATUS_BACKEND_ERROR = 4,        ///< A backend (CUDA driver, device) is missing or failed (BackendError).
  MLFW_STATUS_COMMUNICATION_ERROR = 5,  ///< A collective failed (CommunicationError).
  MLFW_STATUS_OUT_OF_MEMORY = 6,        ///< An allocation failed.
  MLFW_STATUS_INTERNAL_ERROR = 7,       ///< Any other failure (a bug: please report it).
  MLFW_STATUS_CALLBACK_ERROR = 8        ///< A callback of yours returned non-zero (the message names it).
} mlfw_status;

/// The message of the last call of the C API on this thread, when it failed; "" when it
/// succeeded (also when a callback of yours called the C API during it and that call failed).
/// The same text as the C++ API's exception, with every argument and field named as the C
/// caller wrote it: an argument ("invalid argument 'gradients[0]->dtype': {code 0, bits 32,
/// lanes 1} is not float32, float16 or bfloat16 with one lane"), a field of a settings struct
/// ("invalid argument 'config->growth_factor': must be finite and > 1, got 0.5"). Valid until
/// the next call of the C API on this thread; never null.
MLFW_C_API const char* mlfw_last_error(void);

/// The enumerator's name of @p status ("MLFW_STATUS_OK", ...), or "unknown mlfw_status".
MLFW_C_API const char* mlfw_status_name(mlfw_status status);

#ifdef __cplusplus
}
#endif

// NOLINTEND(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#endif  // MLFRAMEWORK_C_STATUS_H_
