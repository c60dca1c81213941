#pragma once
// The boundary of the C API: every entry point runs its body through Call(), which turns the
// library's exceptions into status codes and the thread-local message, so nothing throws into C.

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include <mlframework/c/status.h>
#include <mlframework/core/Error.hpp>

namespace mlframework::c_api {

/// A callback of the caller's returned a failure (MLFW_STATUS_CALLBACK_ERROR).
class CallbackError : public Error {
 public:
  /// Names the callback and what it returned.
  CallbackError(const char* callback, int result)
      : Error("callback '" + std::string(callback) + "' returned " + std::to_string(result)) {}
};

/// Records @p message as the calling thread's last error and returns @p status.
mlfw_status Fail(mlfw_status status, const char* message) noexcept;
/// Clears the calling thread's last error (a call that succeeds leaves "").
void ClearLastError() noexcept;

/// Runs @p body; MLFW_STATUS_OK when it returns, the matching status and message when it throws.
template <class Body>
mlfw_status Call(Body&& body) noexcept {
  ClearLastError();
  try {
    std::forward<Body>(body)();
    // A callback of the caller's may have called the C API and failed while the body ran: the
    // message belongs to this call, which succeeded.
    ClearLastError();
    return MLFW_STATUS_OK;
  } catch (const CallbackError& error) {
    return Fail(MLFW_STATUS_CALLBACK_ERROR, error.what());
  } catch (const ArgumentNullError& error) {
    return Fail(MLFW_STATUS_NULL_ARGUMENT, error.what());
  } catch (const ArgumentError& error) {
    return Fail(MLFW_STATUS_INVALID_ARGUMENT, error.what());
  } catch (const InvalidOperationError& error) {
    return Fail(MLFW_STATUS_INVALID_OPERATION, error.what());
  } catch (const BackendError& error) {
    return Fail(MLFW_STATUS_BACKEND_ERROR, error.what());
  } catch (const CommunicationError& error) {
    return Fail(MLFW_STATUS_COMMUNICATION_ERROR, error.what());
  } catch (const std::bad_alloc& error) {
    return Fail(MLFW_STATUS_OUT_OF_MEMORY, error.what());
  } catch (const std::exception& error) {
    return Fail(MLFW_STATUS_INTERNAL_ERROR, error.what());
  } catch (...) {
    return Fail(MLFW_STATUS_INTERNAL_ERROR, "unknown exception");
  }
}

/// The int a C caller stored in an enum argument or field: any int is valid C, but C++ may
/// assume an enum holds only the values its enumerators span, so the bits are copied, not loaded
/// as the enum (a C enum is int-sized).
template <class Enum>
int EnumValue(const Enum& value) noexcept {
  static_assert(sizeof(Enum) == sizeof(int));
  int raw = 0;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

/// @p pointer, or ArgumentNullError(@p name) when it is null.
template <class T>
T& Deref(T* pointer, const char* name) {
  if (pointer == nullptr) {
    throw ArgumentNullError(name);
  }
  return *pointer;
}

}  // namespace mlframework::c_api

// The entry points are extern "C" functions at global scope, and every one runs through these.
using mlframework::c_api::Call;
using mlframework::c_api::Deref;
