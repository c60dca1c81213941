#pragma once
/// @file Error.hpp
/// @brief The library's exception types (exported, so they can be caught across the shared-library boundary).

#include <stdexcept>
#include <string>

#include <mlframework/export.hpp>

namespace mlframework {

/// Base of every exception the library throws.
class MLFRAMEWORK_EXPORT Error : public std::runtime_error {
 public:
  /// Creates an error with @p message.
  explicit Error(const std::string& message);
  ~Error() override;
  /// Copyable, as exceptions must be.
  Error(const Error&) = default;
  /// Copy-assignable.
  Error& operator=(const Error&) = default;
};

/// A parameter has an invalid value (C# ArgumentException / ArgumentOutOfRangeException).
class MLFRAMEWORK_EXPORT ArgumentError : public Error {
 public:
  /// Creates an error for parameter @p parameter with a message naming it and its value.
  ArgumentError(const std::string& parameter, const std::string& message);
  ~ArgumentError() override;
  /// Copyable, as exceptions must be.
  ArgumentError(const ArgumentError&) = default;
  /// Copy-assignable.
  ArgumentError& operator=(const ArgumentError&) = default;
  /// Name of the offending parameter or field.
  const std::string& Parameter() const noexcept { return parameter_; }

 private:
  std::string parameter_;
};

/// A required pointer parameter is null (C# ArgumentNullException).
class MLFRAMEWORK_EXPORT ArgumentNullError : public ArgumentError {
 public:
  /// Creates an error naming the null parameter.
  explicit ArgumentNullError(const std::string& parameter);
  ~ArgumentNullError() override;
  /// Copyable, as exceptions must be.
  ArgumentNullError(const ArgumentNullError&) = default;
  /// Copy-assignable.
  ArgumentNullError& operator=(const ArgumentNullError&) = default;
};

/// A call is not valid in the object's current state (C# InvalidOperationException).
class MLFRAMEWORK_EXPORT InvalidOperationError : public Error {
 public:
  /// Creates an error saying what was wrong and what to do instead.
  explicit InvalidOperationError(const std::string& message);
  ~InvalidOperationError() override;
  /// Copyable, as exceptions must be.
  InvalidOperationError(const InvalidOperationError&) = default;
  /// Copy-assignable.
  InvalidOperationError& operator=(const InvalidOperationError&) = default;
};

/// A backend (CUDA driver, device) is missing or failed.
class MLFRAMEWORK_EXPORT BackendError : public Error {
 public:
  /// Creates an error describing the backend failure.
  explicit BackendError(const std::string& message);
  ~BackendError() override;
  /// Copyable, as exceptions must be.
  BackendError(const BackendError&) = default;
  /// Copy-assignable.
  BackendError& operator=(const BackendError&) = default;
};

/// A collective (MPI, NCCL) failed or the ranks disagree.
class MLFRAMEWORK_EXPORT CommunicationError : public Error {
 public:
  /// Creates an error naming the call and the library's error string.
  explicit CommunicationError(const std::string& message);
  ~CommunicationError() override;
  /// Copyable, as exceptions must be.
  CommunicationError(const CommunicationError&) = default;
  /// Copy-assignable.
  CommunicationError& operator=(const CommunicationError&) = default;
};

}  // namespace mlframework
