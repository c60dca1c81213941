target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/IOptimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ScalePolicy.cpp)
