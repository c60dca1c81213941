#pragma once
// Private to the MPI engine (includes mpi.h): every MPI call's result goes through Check(), so a
// failure becomes a CommunicationError naming the call and MPI's error string; CountOf() keeps
// element counts within MPI's int.

#include <mpi.h>

#include <array>
#include <climits>
#include <cstddef>
#include <string>

#include <mlframework/core/Error.hpp>

namespace mlframework::distributed::detail {

// MPI's text for the error code @p code ("MPI error code N" when MPI has none).
inline std::string MpiErrorString(int code) {
  std::array<char, MPI_MAX_ERROR_STRING> text{};
  int length = 0;
  if (MPI_Error_string(code, text.data(), &length) != MPI_SUCCESS) {
    return "MPI error code " + std::to_string(code);
  }
  return {text.data(), static_cast<std::size_t>(length)};
}

// CommunicationError "<call> failed: <MPI's text>" unless @p code is MPI_SUCCESS.
inline void Check(int code, const char* call) {
  if (code != MPI_SUCCESS) {
    throw CommunicationError(std::string(call) + " failed: " + MpiErrorString(code));
  }
}

// @p elements as an MPI count; ArgumentError naming @p parameter when it exceeds INT_MAX.
inline int CountOf(std::size_t elements, const char* parameter) {
  if (elements > static_cast<std::size_t>(INT_MAX)) {
    throw ArgumentError(parameter, "has " + std::to_string(elements) +
                                       " elements per rank, more than MPI's int count limit " +
                                       std::to_string(INT_MAX));
  }
  return static_cast<int>(elements);
}

}  // namespace mlframework::distributed::detail

/// Runs an MPI call; throws CommunicationError naming it when it does not return MPI_SUCCESS.
#define MLFW_MPI_CHECK(call) ::mlframework::distributed::detail::Check((call), #call)
