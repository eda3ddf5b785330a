# Installing the service, and the Debian packages built by CPack (`cpack -G DEB` in the build
# directory):
#
#   ratekeeper          (component server) /usr/bin/ratekeeper, /etc/ratekeeper/ratekeeper.yaml
#                       (a conffile), /lib/systemd/system/ratekeeper.service, the documentation;
#                       Depends from dpkg-shlibdeps, Recommends redis-server.
#   libratekeeper-dev   (component dev) the static library, its headers and CMake package.
#   python3-ratekeeper  (component python, when RATEKEEPER_PYTHON) the Python package for
#                       Debian's python3: /usr/lib/python3/dist-packages/ratekeeper.
#
# `cmake --install` installs both components.

install(CODE "set(RATEKEEPER_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(RATEKEEPER_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(RATEKEEPER_DOCDIR \"${CMAKE_INSTALL_DOCDIR}\")
  include(\"${PROJECT_SOURCE_DIR}/cmake/InstallService.cmake\")" COMPONENT server)
install(FILES README.md docs/service.md docs/configuration.md docs/decision-api.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT server)

set(RATEKEEPER_PACKAGE_MAINTAINER "ratekeeper maintainers <ratekeeper@example.org>" CACHE STRING
  "Maintainer field of the Debian packages")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ratekeeper)
set(CPACK_PACKAGE_VENDOR ratekeeper)
set(CPACK_PACKAGE_CONTACT "${RATEKEEPER_PACKAGE_MAINTAINER}")
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPack would make it the first line of both packages'
# descriptions; each package's first line is its own.
set(CPACK_COMPONENTS_ALL server dev)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <name>_<version>-<release>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

set(CPACK_DEBIAN_SERVER_PACKAGE_NAME ratekeeper)
set(CPACK_DEBIAN_SERVER_PACKAGE_SECTION net)
set(CPACK_DEBIAN_SERVER_DESCRIPTION "distributed rate limiter (token bucket, sliding and fixed windows)
ratekeeper limits requests per IP, user, API key or endpoint: a rate-limiting
reverse proxy in front of any HTTP application, a decision API for other
services, an endpoint for nginx's auth_request, Envoy's rate limit service
over gRPC, and metrics. Limits are shared by every instance through Redis;
an in-process store serves single-instance use.

Runs as the systemd service ratekeeper.service (sandboxed, with a dynamic
user), configured by /etc/ratekeeper/ratekeeper.yaml.")
set(CPACK_DEBIAN_SERVER_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_SERVER_PACKAGE_RECOMMENDS redis-server)
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/packaging/debian/conffiles ${PROJECT_SOURCE_DIR}/packaging/debian/postinst
  ${PROJECT_SOURCE_DIR}/packaging/debian/prerm ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

# The library is static: its users link what it links (ratekeeperConfig.cmake finds them).
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libratekeeper-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_DESCRIPTION "distributed rate limiter (C++23 library)
The ratekeeper library (static), its headers and its CMake package:
find_package(ratekeeper) and link ratekeeper::ratekeeper. Token bucket,
sliding and fixed windows, on Redis or in memory.")
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libboost-dev (>= 1.74), libfmt-dev, libhiredis-dev, \
libspdlog-dev, libyaml-cpp-dev, nlohmann-json3-dev, libssl-dev, libnghttp2-dev, pkg-config")

# The Python package: the native module built for Debian's python3 (3.11: the module's ABI).
if(TARGET ratekeeper_python)
  list(APPEND CPACK_COMPONENTS_ALL python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-ratekeeper)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
  set(CPACK_DEBIAN_PYTHON_DESCRIPTION "distributed rate limiter (Python package)
ratekeeper's limiter in a Python process: the native module `ratekeeper`
(synchronous and asyncio checks) and `ratekeeper.asgi`, rate-limiting
middleware, endpoint decorators and dependencies for FastAPI and Starlette.
The same configuration and Redis keys as the ratekeeper server.")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3 (>= 3.11), python3 (<< 3.12)")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "python3-yaml, python3-starlette")
endif()

include(CPack)
