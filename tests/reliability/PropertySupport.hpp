#pragma once
// Random configurations and overflow sequences for the property tests.
//
// Every draw comes from one std::mt19937_64 seeded by PropertySeed(), which
// the tests print: set MLFW_PROPERTY_SEED to replay a failing run exactly.

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <mlframework/amp/ScalePolicy.hpp>

// Whether this build has AddressSanitizer (GCC defines __SANITIZE_ADDRESS__, clang answers
// __has_feature). The sanitizer pass of scripts/test.sh unwinds the stack slowly on every
// allocation, so the long property runs take a prefix of their draws there.
#if defined(__SANITIZE_ADDRESS__)
#define MLFW_PROPERTY_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MLFW_PROPERTY_UNDER_ASAN 1
#endif
#endif

namespace mlframework::testing {

/// True in a build with AddressSanitizer (see above).
#ifdef MLFW_PROPERTY_UNDER_ASAN
inline constexpr bool kUnderAddressSanitizer = true;
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif

/// The seed of this run: MLFW_PROPERTY_SEED when set, a fixed value otherwise (CI is reproducible).
inline std::uint64_t PropertySeed() {
  if (const char* text = std::getenv("MLFW_PROPERTY_SEED")) {
    return std::strtoull(text, nullptr, 10);
  }
  return 20261121;
}

/// A uniformly drawn integer in [low, high].
inline std::int64_t DrawInt(std::mt19937_64& rng, std::int64_t low, std::int64_t high) {
  return std::uniform_int_distribution<std::int64_t>(low, high)(rng);
}

/// A uniformly drawn float in [low, high).
inline float DrawFloat(std::mt19937_64& rng, float low, float high) {
  return std::uniform_real_distribution<float>(low, high)(rng);
}

/// A valid ScalePolicy, often at the edges: MinScale == MaxScale, MaxScale == FLT_MAX,
/// GrowthFactor just above 1 or huge, BackoffFactor just below 1 or tiny, interval and
/// hysteresis of 1 or beyond any run.
inline amp::ScalePolicy DrawPolicy(std::mt19937_64& rng) {
  amp::ScalePolicy policy;
  switch (DrawInt(rng, 0, 5)) {
    case 0:
      policy.MinScale = FLT_MIN;
      break;
    case 1:
      policy.MinScale = 1.0f;
      break;
    default:
      policy.MinScale = std::ldexp(DrawFloat(rng, 1.0f, 2.0f), static_cast<int>(DrawInt(rng, -30, 20)));
  }
  switch (DrawInt(rng, 0, 5)) {
    case 0:
      policy.MaxScale = FLT_MAX;
      break;
    case 1:
      policy.MaxScale = policy.MinScale;
      break;
    default:
      policy.MaxScale = std::fmin(
          FLT_MAX, policy.MinScale * std::ldexp(DrawFloat(rng, 1.0f, 2.0f), static_cast<int>(DrawInt(rng, 0, 60))));
  }
  const double log_min = std::log2(static_cast<double>(policy.MinScale));
  const double log_max = std::log2(static_cast<double>(policy.MaxScale));
  const double log_initial = std::uniform_real_distribution<double>(log_min, log_max)(rng);
  policy.InitialScale =
      std::fmin(policy.MaxScale, std::fmax(policy.MinScale, static_cast<float>(std::exp2(log_initial))));
  switch (DrawInt(rng, 0, 4)) {
    case 0:
      policy.GrowthFactor = std::nextafter(1.0f, 2.0f);
      break;
    case 1:
      policy.GrowthFactor = 1e30f;
      break;
    case 2:
      policy.GrowthFactor = 2.0f;
      break;
    default:
      policy.GrowthFactor = DrawFloat(rng, 1.0f, 16.0f);
      if (policy.GrowthFactor <= 1.0f) {
        policy.GrowthFactor = 2.0f;
      }
  }
  switch (DrawInt(rng, 0, 4)) {
    case 0:
      policy.BackoffFactor = std::nextafter(1.0f, 0.0f);
      break;
    case 1:
      policy.BackoffFactor = 1e-30f;
      break;
    case 2:
      policy.BackoffFactor = 0.5f;
      break;
    default:
      policy.BackoffFactor = DrawFloat(rng, 0.01f, 1.0f);
      if (!(policy.BackoffFactor > 0.0f && policy.BackoffFactor < 1.0f)) {
        policy.BackoffFactor = 0.5f;
      }
  }
  policy.GrowthInterval = DrawInt(rng, 0, 9) == 0 ? std::int64_t{1} << 40 : DrawInt(rng, 1, 40);
  policy.Hysteresis = DrawInt(rng, 0, 9) == 0 ? std::int64_t{1} << 40 : DrawInt(rng, 1, 5);
  return policy;
}

/// A sequence of step outcomes (true: overflow) that switches between regimes: long clean
/// runs (growth), overflow storms (backoff to the floor) and noise, so every rule fires.
inline std::vector<bool> DrawOverflows(std::mt19937_64& rng, std::size_t length) {
  std::vector<bool> steps(length);
  double p = 0.1;
  for (std::size_t i = 0; i < length; ++i) {
    if (DrawInt(rng, 0, 24) == 0) {
      const double regimes[] = {0.0, 0.01, 0.2, 0.5, 0.9, 1.0};
      p = regimes[DrawInt(rng, 0, 5)];
    }
    steps[i] = std::bernoulli_distribution(p)(rng);
  }
  return steps;
}

/// Printable policy for failure messages.
inline std::string Describe(const amp::ScalePolicy& p) {
  std::ostringstream text;
  text << std::setprecision(9) << "{Initial " << p.InitialScale << ", Growth " << p.GrowthFactor << ", Backoff "
       << p.BackoffFactor << ", Interval " << p.GrowthInterval << ", Min " << p.MinScale << ", Max " << p.MaxScale
       << ", Hysteresis " << p.Hysteresis << "}";
  return text.str();
}

}  // namespace mlframework::testing
