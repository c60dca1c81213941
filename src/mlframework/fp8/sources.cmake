# FP8 scaling recipes (namespace mlframework::fp8): front ends over core's FP8 kernels and the
# backends' fused scale update; host code only (the CUDA kernels live in backends/cuda).
target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/CurrentScaling.cpp
  ${CMAKE_CURRENT_LIST_DIR}/DelayedScaling.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/IScalingRecipe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/MXFP8BlockScaling.cpp
  ${CMAKE_CURRENT_LIST_DIR}/PerTensorScaling.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ScaleTable.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ScaleTableCasts.cpp)
