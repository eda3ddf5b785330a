# Embeds lua/*.lua into the library as string constants, looked up by file stem.
function(ratekeeper_embed_lua output)
  set(inputs ${ARGN})
  add_custom_command(
    OUTPUT ${output}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${output} "-DINPUTS=${inputs}" -P ${PROJECT_SOURCE_DIR}/cmake/EmbedLuaScript.cmake
    DEPENDS ${inputs} ${PROJECT_SOURCE_DIR}/cmake/EmbedLuaScript.cmake
    COMMENT "Embedding Lua scripts")
endfunction()
