target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/ParameterSet.cpp
  ${CMAKE_CURRENT_LIST_DIR}/SGD.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Adam.cpp)
