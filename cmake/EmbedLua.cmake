# Builds the Redis scripts from lua/*.lua and embeds them into the library as string
# constants (store/redis/lua_scripts.hpp). Redis cannot include files, so each script is the
# concatenation of its parts, listed in EmbedLuaScript.cmake. The assembled scripts are
# also written to <output dir>/lua/<name>.lua, for redis-cli and the benchmarks.
function(ratekeeper_embed_lua output)
  set(inputs ${ARGN})
  # A ';' would split the argument on the command line: the script splits on '|'.
  string(REPLACE ";" "|" input_arg "${inputs}")
  get_filename_component(dir ${output} DIRECTORY)
  include(${PROJECT_SOURCE_DIR}/cmake/LuaScripts.cmake)
  set(outputs ${output} ${dir}/lua/library.lua)
  foreach(name IN LISTS scripts)
    list(APPEND outputs ${dir}/lua/${name}.lua)
  endforeach()
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${output} "-DINPUTS=${input_arg}" -P ${PROJECT_SOURCE_DIR}/cmake/EmbedLuaScript.cmake
    DEPENDS ${inputs} ${PROJECT_SOURCE_DIR}/cmake/EmbedLuaScript.cmake ${PROJECT_SOURCE_DIR}/cmake/LuaScripts.cmake
    COMMENT "Embedding Lua scripts"
    VERBATIM)
endfunction()
