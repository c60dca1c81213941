target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/Agreement.cpp
  ${CMAKE_CURRENT_LIST_DIR}/BufferPool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/FSDP.cpp
  ${CMAKE_CURRENT_LIST_DIR}/FSDPAmpIntegration.cpp
  ${CMAKE_CURRENT_LIST_DIR}/FSDPMixedPrecisionConfig.cpp
  ${CMAKE_CURRENT_LIST_DIR}/FSDPMixedPrecisionManager.cpp
  ${CMAKE_CURRENT_LIST_DIR}/FSDPShardingUnit.cpp)
