#include <mlframework/distributed/AbortGuard.hpp>

#include <utility>

namespace mlframework::distributed {

AbortGuard::AbortGuard(IProcessGroup& group, std::string what)
    : group_(group), what_(std::move(what)), uncaught_at_entry_(std::uncaught_exceptions()) {}

AbortGuard::~AbortGuard() {
  // More uncaught exceptions than at entry: this scope is being left by a throw.
  if (std::uncaught_exceptions() > uncaught_at_entry_) {
    group_.Abort("exception while running " + what_ + "; ending every rank so none waits forever");
  }
}

}  // namespace mlframework::distributed
