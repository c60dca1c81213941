#include "mlframework/distributed/MpiOptions.hpp"

#include <cmath>
#include <cstdlib>
#include <string>

#include <mlframework/core/Error.hpp>

namespace mlframework::distributed::detail {

double FinalizeTimeoutOf(const MpiProcessGroupOptions& options) {
  if (options.FinalizeTimeoutSeconds) {
    const double seconds = *options.FinalizeTimeoutSeconds;
    if (!std::isfinite(seconds) || !(seconds > 0.0)) {
      throw ArgumentError("options.FinalizeTimeoutSeconds",
                          "must be finite and > 0 seconds, got " + std::to_string(seconds));
    }
    return seconds;
  }
  const char* text = std::getenv("MLFW_MPI_FINALIZE_TIMEOUT_S");
  if (text == nullptr || *text == '\0') return kDefaultFinalizeTimeoutSeconds;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(seconds) || !(seconds > 0.0)) {
    throw ArgumentError("MLFW_MPI_FINALIZE_TIMEOUT_S",
                        std::string("must be a finite number of seconds > 0, got '") + text + "'");
  }
  return seconds;
}

WaitMode WaitModeOf(const MpiProcessGroupOptions& options) {
  if (options.Wait) {
    const WaitMode mode = *options.Wait;
    if (mode != WaitMode::Spin && mode != WaitMode::Sleep && mode != WaitMode::Hybrid) {
      throw ArgumentError("options.Wait", "unknown WaitMode " + std::to_string(static_cast<int>(mode)));
    }
    return mode;
  }
  const char* text = std::getenv("MLFW_MPI_WAIT");
  if (text == nullptr || *text == '\0') return kDefaultWait;
  const std::string name(text);
  if (name == "spin") return WaitMode::Spin;
  if (name == "sleep") return WaitMode::Sleep;
  if (name == "hybrid") return WaitMode::Hybrid;
  throw ArgumentError("MLFW_MPI_WAIT", "must be spin, sleep or hybrid, got '" + name + "'");
}

}  // namespace mlframework::distributed::detail
