# megatron_add_plugin(): builds a megatron-app plugin (a MODULE library) in the tree or out of it.
#
#   megatron_add_plugin(my_model SOURCES my_model.cpp [OUTPUT_DIRECTORY dir] [INSTALL_DESTINATION dir])
#
# The plugin links megatron::core with --no-undefined, hides every symbol but the entry point
# `megatron_plugin` (hidden visibility plus a version script), and carries an RPATH to the core.
include_guard(GLOBAL)

function(megatron_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY;INSTALL_DESTINATION" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "megatron_add_plugin(${name}): SOURCES is required")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE megatron::core ${ARG_LIBRARIES})
  set(version_script "${CMAKE_CURRENT_BINARY_DIR}/${name}.exports.map")
  file(WRITE "${version_script}" "{\n  global: megatron_plugin;\n  local: *;\n};\n")
  set_target_properties(${name} PROPERTIES
    PREFIX "lib"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS "${version_script}")
  target_link_options(${name} PRIVATE
    -Wl,--no-undefined "-Wl,--version-script=${version_script}")
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  endif()
  # Installed plugins live in <prefix>/lib/megatron/plugins, the core in <prefix>/lib.
  set_target_properties(${name} PROPERTIES
    BUILD_RPATH "$<TARGET_FILE_DIR:megatron::core>"
    INSTALL_RPATH "\$ORIGIN/../..")
  if(ARG_INSTALL_DESTINATION)
    install(TARGETS ${name} LIBRARY DESTINATION "${ARG_INSTALL_DESTINATION}")
  endif()
endfunction()
