#include <string>

#include <mlframework/c/mlframework.h>

#include "Call.hpp"

namespace mlframework::c_api {

namespace {
thread_local std::string last_error;  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)
}  // namespace

mlfw_status Fail(mlfw_status status, const char* message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();  // no memory for the message: the status still says what happened
  }
  return status;
}

void ClearLastError() noexcept { last_error.clear(); }

}  // namespace mlframework::c_api

extern "C" {

const char* mlfw_last_error(void) { return mlframework::c_api::last_error.c_str(); }

const char* mlfw_status_name(mlfw_status status) {
  switch (mlframework::c_api::EnumValue(status)) {
    case MLFW_STATUS_OK:
      return "MLFW_STATUS_OK";
    case MLFW_STATUS_INVALID_ARGUMENT:
      return "MLFW_STATUS_INVALID_ARGUMENT";
    case MLFW_STATUS_NULL_ARGUMENT:
      return "MLFW_STATUS_NULL_ARGUMENT";
    case MLFW_STATUS_INVALID_OPERATION:
      return "MLFW_STATUS_INVALID_OPERATION";
    case MLFW_STATUS_BACKEND_ERROR:
      return "MLFW_STATUS_BACKEND_ERROR";
    case MLFW_STATUS_COMMUNICATION_ERROR:
      return "MLFW_STATUS_COMMUNICATION_ERROR";
    case MLFW_STATUS_OUT_OF_MEMORY:
      return "MLFW_STATUS_OUT_OF_MEMORY";
    case MLFW_STATUS_INTERNAL_ERROR:
      return "MLFW_STATUS_INTERNAL_ERROR";
    case MLFW_STATUS_CALLBACK_ERROR:
      return "MLFW_STATUS_CALLBACK_ERROR";
    default:
      break;
  }
  return "unknown mlfw_status";
}

int mlfw_api_version(void) { return MLFW_C_API_VERSION; }

}  // extern "C"
