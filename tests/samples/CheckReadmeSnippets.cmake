# cmake -DREADME=<README.md> -DSNIPPETS=<file|file|...> -P CheckReadmeSnippets.cmake
# Fails unless README.md contains every snippet file verbatim, so the code README
# shows is the code the readme_snippets test compiles and runs.
file(READ "${README}" readme)
string(REPLACE "|" ";" snippets "${SNIPPETS}")
set(missing "")
foreach(snippet ${snippets})
  file(READ "${snippet}" text)
  string(FIND "${readme}" "${text}" position)
  if(position EQUAL -1)
    list(APPEND missing "${snippet}")
  else()
    message(STATUS "README contains ${snippet}")
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "README.md does not contain these files verbatim (copy them into README again): ${missing}")
endif()
