# cmake -DLIBRARY=<libmlframework_c.so> -P CheckCExports.cmake
#
# The C library's dynamic symbol table defines only the C API (mlfw_*): no C++ symbol, no
# symbol of the libraries behind it.
find_program(NM nm REQUIRED)
execute_process(COMMAND ${NM} -D --defined-only ${LIBRARY}
  OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -D ${LIBRARY} failed (${rc})")
endif()
string(REPLACE "\n" ";" lines "${symbols}")
set(count 0)
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] " "" symbol "${line}")
  if(NOT symbol MATCHES "^mlfw_")
    message(FATAL_ERROR "${LIBRARY} exports '${symbol}', which is not part of the C API (mlfw_*)")
  endif()
  math(EXPR count "${count} + 1")
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${LIBRARY} exports no mlfw_ function")
endif()
message(STATUS "c exports ok: ${count} mlfw_ symbols")
