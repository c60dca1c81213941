#pragma once
/// @file AbortGuard.hpp
/// @brief RAII guard that aborts the whole job when a rank leaves a scope by an exception.

#include <exception>
#include <string>

#include <mlframework/distributed/IProcessGroup.hpp>
#include <mlframework/export.hpp>

namespace mlframework::distributed {

/// Aborts the process group when the guarded scope is left by an exception.
///
/// A rank that throws out of a training step while the other ranks wait in a collective
/// would leave them hanging forever. Wrap each rank-local piece of user code (forward,
/// backward, data loading) in an AbortGuard: on normal exit nothing happens; when the
/// scope unwinds because of an exception, the guard calls IProcessGroup::Abort() with
/// @p what and the job ends on every rank with a clear message.
///
/// @code
/// {
///   mlframework::distributed::AbortGuard guard(*group, "forward of layer 3");
///   RunForward();  // throws on one rank only -> every rank is ended, none hangs
/// }
/// @endcode
///
/// Checks whose outcome may differ between ranks but that the library can see coming
/// (shapes, world sizes, states) are instead agreed with an all-reduce first, so every
/// rank throws the same exception together and the job can recover.
class MLFRAMEWORK_EXPORT AbortGuard {
 public:
  /// Guards the current scope on @p group; @p what names the guarded work in the message.
  AbortGuard(IProcessGroup& group, std::string what);
  /// Calls group.Abort() when unwinding because of an exception thrown inside the scope.
  ~AbortGuard();
  /// Not copyable: one guard per scope.
  AbortGuard(const AbortGuard&) = delete;
  /// Not assignable.
  AbortGuard& operator=(const AbortGuard&) = delete;

 private:
  IProcessGroup& group_;
  std::string what_;
  int uncaught_at_entry_;
};

}  // namespace mlframework::distributed
