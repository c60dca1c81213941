target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/CpuTensor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/MultiTensorKernels.cpp)
