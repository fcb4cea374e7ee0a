# Warning flags live on an INTERFACE target so the library never touches global flags.
add_library(sluice_warnings INTERFACE)
target_compile_options(sluice_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual
  $<$<BOOL:${SLUICE_WERROR}>:-Werror>)
