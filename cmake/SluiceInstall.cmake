# Install rules: headers, the libraries, a CMake package with one export set
# per component (sluice::core, sluice::log, sluice::store, sluice::redis; sluiceConfig.cmake
# finds each one's dependencies only when it is asked for) and pkg-config
# files (sluice.pc, sluice-log.pc, sluice-store.pc, sluice-redis.pc). tests/install checks them
# by building consumers against an installed tree.
include(CMakePackageConfigHelpers)

set(SLUICE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
set(SLUICE_COMPONENTS "")
# The store links sluice::redis when both are built (redis:// locations).
if(SLUICE_WITH_LOG AND SLUICE_WITH_REDIS)
  set(SLUICE_STORE_WITH_REDIS TRUE)
else()
  set(SLUICE_STORE_WITH_REDIS FALSE)
endif()

set(_sluice_header_excludes "")
if(NOT SLUICE_WITH_LOG)
  # store.h too: sluice::store is built on the log.
  list(APPEND _sluice_header_excludes PATTERN log EXCLUDE PATTERN store.h EXCLUDE)
endif()
if(NOT SLUICE_WITH_REDIS)
  list(APPEND _sluice_header_excludes PATTERN redis EXCLUDE)
endif()
install(DIRECTORY include/sluice DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${_sluice_header_excludes})

install(TARGETS sluice_core EXPORT sluice-core-targets)
install(EXPORT sluice-core-targets NAMESPACE sluice:: DESTINATION ${SLUICE_CMAKE_DIR})
if(SLUICE_WITH_LOG)
  list(APPEND SLUICE_COMPONENTS log)
  install(TARGETS sluice_log EXPORT sluice-log-targets)
  install(EXPORT sluice-log-targets NAMESPACE sluice:: DESTINATION ${SLUICE_CMAKE_DIR})
  install(FILES cmake/FindISAL.cmake DESTINATION ${SLUICE_CMAKE_DIR})
  list(APPEND SLUICE_COMPONENTS store)
  install(TARGETS sluice_store EXPORT sluice-store-targets)
  install(EXPORT sluice-store-targets NAMESPACE sluice:: DESTINATION ${SLUICE_CMAKE_DIR})
endif()
if(SLUICE_BUILD_TOOLS)
  install(TARGETS sluice_cli)
  install(FILES docs/cli.md DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/sluice)
  install(FILES docs/sluice.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endif()
if(SLUICE_WITH_REDIS)
  list(APPEND SLUICE_COMPONENTS redis)
  install(TARGETS sluice_redis EXPORT sluice-redis-targets)
  install(EXPORT sluice-redis-targets NAMESPACE sluice:: DESTINATION ${SLUICE_CMAKE_DIR})
endif()

configure_package_config_file(cmake/sluiceConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/cmake/sluiceConfig.cmake INSTALL_DESTINATION ${SLUICE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/cmake/sluiceConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)  # 0.x: a minor release may break the API
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cmake/sluiceConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/cmake/sluiceConfigVersion.cmake
        DESTINATION ${SLUICE_CMAKE_DIR})

# --- pkg-config ---
# The libraries are static unless BUILD_SHARED_LIBS is set. A static
# library's own dependencies are needed by every link, so they go in Libs
# (plain `pkg-config --libs` works); for a shared one in Libs.private and
# Requires.private, which only `--static` links read.
get_target_property(_sluice_core_type sluice_core TYPE)
if(_sluice_core_type STREQUAL "STATIC_LIBRARY")
  set(_sluice_pc_static TRUE)
  set(SLUICE_PC_NOTE "Static libraries: their dependencies are in Libs.")
else()
  set(_sluice_pc_static FALSE)
  set(SLUICE_PC_NOTE "Shared libraries: their own dependencies are in Requires.private and Libs.private.")
endif()
# pkg-config splits a field's value at spaces unless they are escaped with a
# backslash (and prints them escaped, for the shell that reads its output):
# every path in a .pc file has its spaces escaped.
foreach(_dir LIB INCLUDE)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_dir}DIR}")
    string(REPLACE " " "\\ " SLUICE_PC_${_dir}DIR "${CMAKE_INSTALL_${_dir}DIR}")
  else()
    set(SLUICE_PC_${_dir}DIR "\${prefix}/${CMAKE_INSTALL_${_dir}DIR}")
  endif()
endforeach()
# The prefix is the one given at install time (cmake --install --prefix).
set(SLUICE_INSTALL_PREFIX "@SLUICE_INSTALL_PREFIX@")

# sluice_pkg_config(<file> <name> <description> [REQUIRES ...] LIBS ...
#                   [PRIVATE_REQUIRES ...] [PRIVATE_LIBS ...] [STATIC_LIBS ...]):
# PRIVATE_* describe a shared library's own dependencies; STATIC_LIBS are the
# same dependencies as flags, appended to Libs for a static library.
function(sluice_pkg_config file name description)
  cmake_parse_arguments(ARG "" "" "REQUIRES;LIBS;PRIVATE_REQUIRES;PRIVATE_LIBS;STATIC_LIBS" ${ARGN})
  set(SLUICE_PC_NAME ${name})
  set(SLUICE_PC_DESCRIPTION ${description})
  if(_sluice_pc_static)
    list(APPEND ARG_LIBS ${ARG_STATIC_LIBS})
    set(ARG_PRIVATE_LIBS "")
    set(ARG_PRIVATE_REQUIRES "")
  endif()
  list(JOIN ARG_LIBS " " SLUICE_PC_LIBS)
  set(SLUICE_PC_FIELDS "")  # only the optional fields that are not empty
  if(ARG_REQUIRES)
    list(JOIN ARG_REQUIRES ", " value)
    string(APPEND SLUICE_PC_FIELDS "Requires: ${value}\n")
  endif()
  if(ARG_PRIVATE_REQUIRES)
    list(JOIN ARG_PRIVATE_REQUIRES ", " value)
    string(APPEND SLUICE_PC_FIELDS "Requires.private: ${value}\n")
  endif()
  if(ARG_PRIVATE_LIBS)
    list(JOIN ARG_PRIVATE_LIBS " " value)
    string(APPEND SLUICE_PC_FIELDS "Libs.private: ${value}\n")
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/sluice.pc.in
                 ${PROJECT_BINARY_DIR}/pkgconfig/${file}.in @ONLY)
  set_property(GLOBAL APPEND PROPERTY SLUICE_PC_FILES ${file})
endfunction()

# -l flags for a library found by path (-L only outside the linker's own dirs).
function(sluice_lib_flags out path)
  get_filename_component(dir "${path}" DIRECTORY)
  get_filename_component(name "${path}" NAME_WE)
  string(REGEX REPLACE "^lib" "" name "${name}")
  set(flags "-l${name}")
  if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    string(REPLACE " " "\\ " dir "${dir}")
    set(flags "-L${dir} ${flags}")
  endif()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

sluice_pkg_config(sluice.pc sluice "Bounded queues, batcher and pipeline stages (sluice::core)"
  LIBS -lsluice_core -pthread)
if(SLUICE_WITH_LOG)
  sluice_lib_flags(_sluice_isal_flags "${ISAL_LIBRARY}")
  sluice_pkg_config(sluice-log.pc sluice-log "sluice's durable log: Topic, Channel (sluice::log)"
    REQUIRES "sluice = ${PROJECT_VERSION}" LIBS -lsluice_log
    PRIVATE_LIBS ${_sluice_isal_flags} STATIC_LIBS ${_sluice_isal_flags})
  set(_sluice_store_requires "sluice-log = ${PROJECT_VERSION}")
  if(SLUICE_STORE_WITH_REDIS)
    list(APPEND _sluice_store_requires "sluice-redis = ${PROJECT_VERSION}")
  endif()
  sluice_pkg_config(sluice-store.pc sluice-store "sluice's named queues: QueueStore (sluice::store)"
    REQUIRES ${_sluice_store_requires} LIBS -lsluice_store)
endif()
if(SLUICE_WITH_REDIS)
  # Static: -lhiredis itself rather than Requires: hiredis, whose Cflags
  # (-I.../hiredis -D_FILE_OFFSET_BITS=64) a consumer does not need: no
  # public header includes hiredis.
  sluice_lib_flags(_sluice_hiredis_flags "${hiredis_LINK_LIBRARIES}")
  sluice_pkg_config(sluice-redis.pc sluice-redis "sluice's Redis queues: PressureQueue (sluice::redis)"
    REQUIRES "sluice = ${PROJECT_VERSION}" LIBS -lsluice_redis
    PRIVATE_REQUIRES hiredis STATIC_LIBS ${_sluice_hiredis_flags})
endif()

get_property(_sluice_pc_files GLOBAL PROPERTY SLUICE_PC_FILES)
install(CODE "set(_sluice_pc_dir [[${PROJECT_BINARY_DIR}/pkgconfig]])
set(_sluice_pc_files [[${_sluice_pc_files}]])")
install(CODE [[
foreach(_pc IN LISTS _sluice_pc_files)
  file(READ "${_sluice_pc_dir}/${_pc}.in" _text)
  string(REPLACE " " "\\ " _prefix "${CMAKE_INSTALL_PREFIX}")  # a space: escaped
  string(REPLACE "@SLUICE_INSTALL_PREFIX@" "${_prefix}" _text "${_text}")
  file(WRITE "${_sluice_pc_dir}/install/${_pc}" "${_text}")
endforeach()
]])
list(TRANSFORM _sluice_pc_files PREPEND ${PROJECT_BINARY_DIR}/pkgconfig/install/)
install(FILES ${_sluice_pc_files} DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/sluice)
