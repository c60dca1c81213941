/// @file mlframework.h
/// @brief The C API of libmlframework_c: includes every header of it, and its version.
///
/// A stable C ABI over DLPack tensors for any compiler, standard library or language (ctypes,
/// cffi, JAX's FFI, ...). Every function returns an mlfw_status and never lets an exception
/// through; mlfw_last_error() holds the message of a failed call. See docs/c-api.md.
#ifndef MLFRAMEWORK_C_MLFRAMEWORK_H_
#define MLFRAMEWORK_C_MLFRAMEWORK_H_

// C declarations, for C compilers: C's typedefs and headers, and the C API's mlfw_ names.
// NOLINTBEGIN(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#include <mlframework/c/conversion_layer.h>
#include <mlframework/c/fp8.h>
#include <mlframework/c/grad_scaler.h>
#include <mlframework/c/multi_tensor.h>
#include <mlframework/c/observer.h>
#include <mlframework/c/optimizers.h>
#include <mlframework/c/status.h>

/// The version of the C API these headers declare. It grows by one with every release that adds
/// to the API; a release that changed or removed anything would also change the library's
/// SONAME (see docs/c-api.md, "ABI stability").
/// Version 2 added the optimizers' state and master formats (mlfw_state_options,
/// mlfw_adam_create_with_states(), mlfw_sgd_create_with_states()).
#define MLFW_C_API_VERSION 2

#ifdef __cplusplus
extern "C" {
#endif

/// The version of the C API the loaded library implements (MLFW_C_API_VERSION of its build): a
/// program built against version N runs with a library whose version is N or more.
MLFW_C_API int mlfw_api_version(void);

#ifdef __cplusplus
}
#endif

// NOLINTEND(modernize-use-using,modernize-deprecated-headers,readability-identifier-naming)

#endif  // MLFRAMEWORK_C_MLFRAMEWORK_H_
