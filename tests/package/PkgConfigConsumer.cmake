# cmake -DPREFIX=<install prefix> -DLIBDIR=<lib dir name> -DCXX=<compiler> -DSOURCE=<main.cpp>
#       -DOUT=<executable> [-DEXTRA=<flags>] [-DPACKAGE=<pc name>] [-DEXPECT=<regex>]
#       -P PkgConfigConsumer.cmake
#
# Builds and runs the consumer with nothing but `pkg-config --cflags --libs <PACKAGE>`
# (mlframework by default; CXX may be a C compiler for mlframework-c), and checks that its
# output matches EXPECT ("consumer ok" by default).
find_program(PKG_CONFIG pkg-config REQUIRED)
if(NOT PACKAGE)
  set(PACKAGE mlframework)
endif()
if(NOT EXPECT)
  set(EXPECT "consumer ok")
endif()
set(ENV{PKG_CONFIG_PATH} "${PREFIX}/${LIBDIR}/pkgconfig")
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs ${PACKAGE}
  OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs ${PACKAGE} failed (${rc})")
endif()
message(STATUS "pkg-config ${PACKAGE}: ${flags}")
separate_arguments(flag_list UNIX_COMMAND "${flags} ${EXTRA}")
execute_process(COMMAND ${CXX} ${SOURCE} -o ${OUT} ${flag_list} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compiling ${SOURCE} with the pkg-config flags failed (${rc})")
endif()
execute_process(COMMAND ${OUT} OUTPUT_VARIABLE output RESULT_VARIABLE rc)
message(STATUS "${output}")
if(NOT rc EQUAL 0 OR NOT output MATCHES "${EXPECT}")
  message(FATAL_ERROR "the pkg-config consumer failed (${rc}): ${output}")
endif()
