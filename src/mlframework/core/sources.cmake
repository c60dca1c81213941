target_sources(mlframework PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/Device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/DeviceFactory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/DeviceScaling.cpp
  ${CMAKE_CURRENT_LIST_DIR}/DLPack.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Error.cpp
  ${CMAKE_CURRENT_LIST_DIR}/HostAlias.cpp
  ${CMAKE_CURRENT_LIST_DIR}/HostScaling.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ITensor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/MultiTensor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/SameMemory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ScalePolicy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ScaleStateOwner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/StateBlob.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Tensor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/TensorBackend.cpp)
