/* Checks shared by the C API's test programs (compiled as C11). */
#ifndef MLFW_TESTS_C_CAPICHECK_H_
#define MLFW_TESTS_C_CAPICHECK_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mlframework/c/mlframework.h>

/* Fails the program with the location, the expression and the library's message. */
#define CHECK(condition)                                                                                \
  do {                                                                                                  \
    if (!(condition)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; mlfw_last_error: %s\n", __FILE__, __LINE__, #condition, \
              mlfw_last_error());                                                                       \
      exit(1);                                                                                          \
    }                                                                                                   \
  } while (0)

/* A call that must succeed. */
#define CHECK_OK(call) CHECK((call) == MLFW_STATUS_OK)

/* @p call fails with @p status and a message containing @p text. */
#define EXPECT_STATUS(call, status, text)                                                                        \
  do {                                                                                                           \
    const mlfw_status got_ = (call);                                                                             \
    if (got_ != (status) || strstr(mlfw_last_error(), (text)) == NULL) {                                         \
      fprintf(stderr, "%s:%d: %s returned %s with \"%s\"; expected %s with \"%s\"\n", __FILE__, __LINE__, #call, \
              mlfw_status_name(got_), mlfw_last_error(), #status, (text));                                       \
      exit(1);                                                                                                   \
    }                                                                                                            \
  } while (0)

/* A one-dimensional float32 CPU tensor over data[0..n). */
static inline DLTensor CApiFloat32Vector(float* data, int64_t* shape) {
  DLTensor tensor;
  tensor.data = data;
  tensor.device.device_type = kDLCPU;
  tensor.device.device_id = 0;
  tensor.ndim = 1;
  tensor.dtype.code = kDLFloat;
  tensor.dtype.bits = 32;
  tensor.dtype.lanes = 1;
  tensor.shape = shape;
  tensor.strides = NULL;
  tensor.byte_offset = 0;
  return tensor;
}

#endif /* MLFW_TESTS_C_CAPICHECK_H_ */
