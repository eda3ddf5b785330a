# Run by `cmake --install` (and by CPack) for the `server` component: installs the example
# configuration and the systemd unit where the prefix being installed to puts them, which is
# only known at install time. RATEKEEPER_SOURCE_DIR, RATEKEEPER_BINDIR and RATEKEEPER_DOCDIR
# (the GNUInstallDirs directories, relative to the prefix or absolute) are set by the caller.
#
#   prefix /usr (the Debian package): /etc/ratekeeper/ratekeeper.yaml, /lib/systemd/system
#   any other prefix P:               P/etc/ratekeeper/ratekeeper.yaml, P/lib/systemd/system
#                                     (systemd also reads /usr/local/lib/systemd/system)
#
# An existing configuration file is never replaced: the example is then left out.

string(REGEX REPLACE "(.)/+$" "\\1" _rk_prefix "${CMAKE_INSTALL_PREFIX}")
if(_rk_prefix STREQUAL "/usr")
  set(_rk_confdir /etc/ratekeeper)
  set(_rk_unitdir /lib/systemd/system)
else()
  set(_rk_confdir "${_rk_prefix}/etc/ratekeeper")
  set(_rk_unitdir "${_rk_prefix}/lib/systemd/system")
endif()
foreach(_rk_dir IN ITEMS BINDIR DOCDIR)
  if(IS_ABSOLUTE "${RATEKEEPER_${_rk_dir}}")
    set(_rk_full_${_rk_dir} "${RATEKEEPER_${_rk_dir}}")
  else()
    set(_rk_full_${_rk_dir} "${_rk_prefix}/${RATEKEEPER_${_rk_dir}}")
  endif()
endforeach()

# The example configuration.
set(_rk_config "${_rk_confdir}/ratekeeper.yaml")
if(EXISTS "$ENV{DESTDIR}${_rk_config}")
  message(STATUS "Keeping: $ENV{DESTDIR}${_rk_config} (an existing configuration is not replaced)")
else()
  file(INSTALL DESTINATION "${_rk_confdir}" TYPE FILE PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
       FILES "${RATEKEEPER_SOURCE_DIR}/packaging/ratekeeper.yaml")
endif()

# The unit, naming the installed program and configuration.
set(RATEKEEPER_BINARY "${_rk_full_BINDIR}/ratekeeper")
set(RATEKEEPER_CONFIG "${_rk_config}")
set(RATEKEEPER_DOCDIR "${_rk_full_DOCDIR}")
file(READ "${RATEKEEPER_SOURCE_DIR}/packaging/ratekeeper.service.in" _rk_unit)
string(CONFIGURE "${_rk_unit}" _rk_unit @ONLY)
set(_rk_unit_file "${_rk_unitdir}/ratekeeper.service")
message(STATUS "Installing: $ENV{DESTDIR}${_rk_unit_file}")
file(WRITE "$ENV{DESTDIR}${_rk_unit_file}" "${_rk_unit}")
file(CHMOD "$ENV{DESTDIR}${_rk_unit_file}" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_rk_unit_file}")
