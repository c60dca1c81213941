target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/MixedPrecisionOptions.cpp
  ${CMAKE_CURRENT_LIST_DIR}/DynamicLossScaler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/PrecisionManager.cpp
  ${CMAKE_CURRENT_LIST_DIR}/GradientConversionLayer.cpp)
