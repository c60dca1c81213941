# install(): headers, the library, its export set and a package config, so
# find_package(mlframework CONFIG REQUIRED) works for consumers.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MLFW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mlframework)

install(TARGETS mlframework EXPORT mlframeworkTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mlframework DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/mlframework/export.hpp
              ${PROJECT_BINARY_DIR}/include/mlframework/config.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mlframework)
install(EXPORT mlframeworkTargets NAMESPACE mlframework:: DESTINATION ${MLFW_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mlframeworkConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mlframeworkConfig.cmake
  INSTALL_DESTINATION ${MLFW_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mlframeworkConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mlframeworkConfig.cmake
              ${PROJECT_BINARY_DIR}/mlframeworkConfigVersion.cmake
        DESTINATION ${MLFW_CMAKE_DIR})
