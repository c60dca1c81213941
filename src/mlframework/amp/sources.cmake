target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/DynamicLossScaler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/GradScaler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/GradScalerContext.cpp
  ${CMAKE_CURRENT_LIST_DIR}/GradScalerFactory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ILossScaler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/IOptimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ScaleFactor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/StaticLossScaler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/UnscaleWorkspace.cpp)
