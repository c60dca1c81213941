#pragma once
/// @file ScalePolicy.hpp
/// @brief The dynamic loss-scaling rules under their amp names.
///
/// The rules are plain data in core (core/ScalePolicy.hpp), so backends and every
/// front end share them without depending on amp; these declarations keep the
/// `amp::` spellings working.

#include <mlframework/core/ScalePolicy.hpp>

namespace mlframework::amp {

using mlframework::ScalePolicy;            ///< See core/ScalePolicy.hpp.
using mlframework::ScalePolicyFieldNames;  ///< See core/ScalePolicy.hpp.
using mlframework::ScaleState;             ///< See core/ScalePolicy.hpp.
using mlframework::UpdateScaleState;       ///< See core/ScalePolicy.hpp.
using mlframework::ValidateScalePolicy;    ///< See core/ScalePolicy.hpp.

}  // namespace mlframework::amp
