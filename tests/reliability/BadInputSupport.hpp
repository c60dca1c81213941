#pragma once
// Helpers for the bad-input suites: expect the documented exception type
// (naming the parameter) and prove the call left everything as it was.

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <mlframework/core/Error.hpp>
#include <mlframework/core/ITensor.hpp>

namespace mlframework::testing {

/// Number of bad-input cases checked in this process (printed by each suite).
inline int& BadInputCount() {
  static int count = 0;
  return count;
}

/// Runs @p call, requires it to throw exactly-or-derived @p Expected whose parameter
/// (for ArgumentError and below) contains @p parameter, and counts the case.
template <typename Expected>
void ExpectError(const std::function<void()>& call, const std::string& parameter = {}) {
  ++BadInputCount();
  try {
    call();
  } catch (const Expected& error) {
    if constexpr (std::is_base_of_v<ArgumentError, Expected>) {
      BOOST_TEST(error.Parameter().find(parameter) != std::string::npos,
                 "parameter '" << error.Parameter() << "' should name '" << parameter << "': " << error.what());
    }
    BOOST_TEST(std::string(error.what()).size() > 0);
    return;
  } catch (const std::exception& other) {
    BOOST_ERROR("expected " << typeid(Expected).name() << ", got " << typeid(other).name() << ": " << other.what());
    return;
  }
  BOOST_ERROR("expected " << typeid(Expected).name() << ", nothing was thrown");
}

/// The elements of every tensor (null stays empty), to compare before and after a failed call.
inline std::vector<std::vector<float>> Snapshot(std::span<const TensorPtr> tensors) {
  std::vector<std::vector<float>> values;
  values.reserve(tensors.size());
  for (const TensorPtr& tensor : tensors) {
    values.push_back(tensor ? tensor->ToFloatVector() : std::vector<float>{});
  }
  return values;
}

}  // namespace mlframework::testing
