// Uses the installed library through the umbrella header only.
#include <cstdio>

#include <mlframework/mlframework.hpp>

int main() {
  using namespace mlframework;
  const TensorPtr grad = FromVector({1.0f, 2.0f, 3.0f}, {3}, DataType::Float16);
  const TensorPtr list[] = {grad};
  const bool overflow = UnscaleAndCheck(list, 0.5f);
  const auto values = grad->ToFloatVector();
  try {
    (void)FromVector({1.0f}, {2});
    return 1;
  } catch (const ArgumentError& error) {  // exception types cross the library boundary
    std::printf("caught: %s\n", error.what());
  }
  if (overflow || values[2] != 1.5f) {
    return 1;
  }
  std::printf("consumer ok (mlframework %s)\n", MLFW_VERSION);
  return 0;
}
