# install(): headers, the libraries, their export sets, a package config with components and
# pkg-config files, so both of these work for consumers:
#   find_package(mlframework CONFIG REQUIRED [COMPONENTS c cuda mpi])
#   pkg-config --cflags --libs mlframework [mlframework-cuda] [mlframework-mpi]
#   pkg-config --cflags --libs mlframework-c      (the C API alone, for C and any other compiler)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MLFW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mlframework)

install(TARGETS mlframework EXPORT mlframeworkTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT mlframeworkTargets NAMESPACE mlframework:: DESTINATION ${MLFW_CMAKE_DIR})
# One export set per component, loaded only when the consumer asks for the component.
foreach(component c cuda mpi)
  install(TARGETS mlframework_${component} EXPORT mlframework-${component}-targets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT mlframework-${component}-targets NAMESPACE mlframework:: DESTINATION ${MLFW_CMAKE_DIR})
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mlframework DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/mlframework/export.hpp
              ${PROJECT_BINARY_DIR}/include/mlframework/config.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mlframework)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mlframeworkConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mlframeworkConfig.cmake
  INSTALL_DESTINATION ${MLFW_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mlframeworkConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mlframeworkConfig.cmake
              ${PROJECT_BINARY_DIR}/mlframeworkConfigVersion.cmake
        DESTINATION ${MLFW_CMAKE_DIR})

# pkg-config: mlframework.pc for the core library, one file per component that requires it.
# Paths relative to the .pc file, so an installed tree can move.
set(MLFW_PC_LIBS_mlframework "-lmlframework")
set(MLFW_PC_LIBS_mlframework-cuda "-lmlframework_cuda")
set(MLFW_PC_LIBS_mlframework-mpi "-lmlframework_mpi")
set(MLFW_PC_LIBS_mlframework-c "-lmlframework_c")
foreach(pc mlframework mlframework-cuda mlframework-mpi mlframework-c)
  set(MLFW_PC_NAME ${pc})
  set(MLFW_PC_LIBS ${MLFW_PC_LIBS_${pc}})
  # The C API's headers are C11 and need only <dlpack/dlpack.h> (in the system include path).
  if(pc STREQUAL "mlframework-c")
    set(MLFW_PC_CFLAGS "-I\${includedir}")
  else()
    set(MLFW_PC_CFLAGS "-I\${includedir} -std=c++20")
  endif()
  if(pc STREQUAL "mlframework" OR pc STREQUAL "mlframework-c")
    set(MLFW_PC_REQUIRES "")
  else()
    set(MLFW_PC_REQUIRES "Requires: mlframework = ${PROJECT_VERSION}")
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/mlframework.pc.in ${PROJECT_BINARY_DIR}/pkgconfig/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
