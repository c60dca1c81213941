#pragma once
// Private to the MPI engine: the MpiProcessGroupOptions that fall back to environment variables,
// resolved (option, else environment, else default) and checked before any MPI call, so bad
// values are refused on every rank alike and no collective is left half-started.

#include <mlframework/distributed/MpiProcessGroup.hpp>

namespace mlframework::distributed::detail {

// MpiProcessGroupOptions::FinalizeTimeoutSeconds, else MLFW_MPI_FINALIZE_TIMEOUT_S, else
// kDefaultFinalizeTimeoutSeconds; ArgumentError naming the option or the variable when bad.
double FinalizeTimeoutOf(const MpiProcessGroupOptions& options);

// MpiProcessGroupOptions::Wait, else MLFW_MPI_WAIT (spin | sleep | hybrid), else kDefaultWait;
// ArgumentError naming the option or the variable and the value when bad.
WaitMode WaitModeOf(const MpiProcessGroupOptions& options);

// The mode of an empty option and an unset variable.
inline constexpr WaitMode kDefaultWait = WaitMode::Spin;

}  // namespace mlframework::distributed::detail
