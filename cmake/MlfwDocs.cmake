# `docs` target: Doxygen over include/ (configured by the root Doxyfile).
find_package(Doxygen QUIET)
if(DOXYGEN_FOUND)
  add_custom_target(docs
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/docs
    COMMAND ${CMAKE_COMMAND} -E env MLFW_DOCS_OUT=${PROJECT_BINARY_DIR}/docs
            ${DOXYGEN_EXECUTABLE} ${PROJECT_SOURCE_DIR}/Doxyfile
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    COMMENT "API documentation (Doxygen, warnings are errors)"
    VERBATIM)
  message(STATUS "mlframework: docs target ON (doxygen ${DOXYGEN_VERSION})")
else()
  message(STATUS "mlframework: docs target OFF (doxygen not found)")
endif()
