# cmake -DDOCS=<file.md|file.md|...> [-DDOC_DIR=<docs>] -DSNIPPET_DIR=<samples/doc_snippets>
#       -P CheckDocSnippets.cmake
#
# Fails unless every ```cpp block of the given Markdown files (and of every DOC_DIR/*.md, found
# when the test runs, so a new guide is checked without reconfiguring) appears verbatim in one of the
# .cpp/.hpp files of SNIPPET_DIR, which the doc_snippets target compiles (and, where they need
# no MPI rank or GPU, runs). A block may be an excerpt of a file (a whole function, say), but it
# must match it character for character, from a line start to a line end: so the code the docs show is code
# that compiles against the library. Blocks in other languages (sh, cmake, text, untagged) are
# commands and output, not C++, and are not checked.
cmake_minimum_required(VERSION 3.25)
if(NOT DOCS OR NOT SNIPPET_DIR)
  message(FATAL_ERROR "usage: cmake -DDOCS=<a.md|b.md> [-DDOC_DIR=<dir>] -DSNIPPET_DIR=<dir> -P CheckDocSnippets.cmake")
endif()

file(GLOB snippet_files "${SNIPPET_DIR}/*.cpp" "${SNIPPET_DIR}/*.hpp")
if(NOT snippet_files)
  message(FATAL_ERROR "no snippet sources (*.cpp, *.hpp) in ${SNIPPET_DIR}")
endif()
set(sources "\n")  # every file starts on a new line, so a block must start at a line start
foreach(snippet_file ${snippet_files})
  file(READ "${snippet_file}" text)
  string(APPEND sources "${text}\n\n")
endforeach()

set(open_fence "```cpp\n")
string(LENGTH "${open_fence}" open_length)
string(REPLACE "|" ";" docs "${DOCS}")
if(DOC_DIR)
  file(GLOB guides "${DOC_DIR}/*.md")
  list(APPEND docs ${guides})
endif()
set(checked 0)
set(failures 0)
foreach(doc ${docs})
  file(READ "${doc}" markdown)
  set(rest "${markdown}")
  while(TRUE)
    string(FIND "${rest}" "${open_fence}" start)
    if(start EQUAL -1)
      break()
    endif()
    math(EXPR body_start "${start} + ${open_length}")
    string(SUBSTRING "${rest}" ${body_start} -1 rest)
    string(FIND "${rest}" "\n```" end)
    if(end EQUAL -1)
      message(SEND_ERROR "${doc}: a ```cpp block is not closed")
      math(EXPR failures "${failures} + 1")
      break()
    endif()
    math(EXPR block_length "${end} + 1")  # with the block's last newline
    string(SUBSTRING "${rest}" 0 ${block_length} block)
    string(SUBSTRING "${rest}" ${block_length} -1 rest)
    string(REGEX MATCH "^[^\n]*" first_line "${block}")
    math(EXPR checked "${checked} + 1")
    string(FIND "${sources}" "\n${block}" position)
    if(position EQUAL -1)
      message(SEND_ERROR "${doc}: this ```cpp block is in no file of ${SNIPPET_DIR} (edit the snippet "
                         "file and copy it into the doc again): it starts with\n  ${first_line}")
      math(EXPR failures "${failures} + 1")
    else()
      message(STATUS "${doc}: compiled: ${first_line}")
    endif()
  endwhile()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no ```cpp block found in ${DOCS}")
endif()
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} of ${checked} ```cpp blocks are not verbatim in ${SNIPPET_DIR}")
endif()
message(STATUS "all ${checked} ```cpp blocks are compiled snippets")
