# FindISAL: Intel's ISA-L (https://github.com/intel/isa-l), for its CRC-32C.
# Defines ISAL_FOUND, ISAL_INCLUDE_DIR, ISAL_LIBRARY and the imported target
# ISAL::ISAL. Installed next to sluiceConfig.cmake, which uses it to find
# sluice::log's dependency in a consumer's build.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_ISAL QUIET libisal)  # hints only
endif()
find_path(ISAL_INCLUDE_DIR isa-l/crc.h HINTS ${PC_ISAL_INCLUDE_DIRS})
find_library(ISAL_LIBRARY isal HINTS ${PC_ISAL_LIBRARY_DIRS})

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(ISAL REQUIRED_VARS ISAL_LIBRARY ISAL_INCLUDE_DIR)
mark_as_advanced(ISAL_INCLUDE_DIR ISAL_LIBRARY)

if(ISAL_FOUND AND NOT TARGET ISAL::ISAL)
  add_library(ISAL::ISAL UNKNOWN IMPORTED)
  set_target_properties(ISAL::ISAL PROPERTIES
    IMPORTED_LOCATION "${ISAL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${ISAL_INCLUDE_DIR}")
endif()
