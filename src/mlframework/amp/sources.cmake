target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/ScalePolicy.cpp)
