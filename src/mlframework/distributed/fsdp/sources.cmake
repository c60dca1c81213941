target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/Agreement.cpp
  ${CMAKE_CURRENT_LIST_DIR}/BufferPool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/FSDP.cpp
  ${CMAKE_CURRENT_LIST_DIR}/FSDPMixedPrecision.cpp
  ${CMAKE_CURRENT_LIST_DIR}/FSDPShardingUnit.cpp)
