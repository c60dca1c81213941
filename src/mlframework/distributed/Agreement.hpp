#pragma once
// Private: checks agreed across ranks. A check whose outcome could differ between ranks runs
// locally, then one all-reduce tells every rank whether any rank failed, so all ranks throw
// together (the failing rank its own exception, the others the same type naming that rank)
// instead of some ranks entering a collective the others never reach.

#include <exception>
#include <functional>
#include <string>

#include <mlframework/distributed/IProcessGroup.hpp>

namespace mlframework::distributed::detail {

// Runs @p check; when it throws on any rank, throws on every rank. @p what names the operation.
void AgreeOn(IProcessGroup& group, const std::string& what, const std::function<void()>& check);

}  // namespace mlframework::distributed::detail
