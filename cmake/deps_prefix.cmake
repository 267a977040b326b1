# -DLAZYJIT_DEPS_PREFIX=DIR: LLVM 19, oneTBB, xxHash and hiredis from one folder,
# for a machine that lacks them (a GPU machine, say: docs/gpu.md). DIR is
# what scripts/device/pack.sh packs into .device/deps.tar.xz, unpacked:
#   llvm/include/{llvm,llvm-c}       LLVM 19's headers
#   llvm/lib/libLLVM*.a              static archives of the components lazyjit uses
#   llvm/lib/llvm-libs.txt           those archives in link order, one a line
#   tbb/include/{tbb,oneapi}  tbb/lib/libtbb.so.12 (+ libtbbmalloc.so.2)
#   xxhash/include/xxhash.h          (header-only: graph_ir/hash.cpp defines XXH_INLINE_ALL)
#   hiredis/include/hiredis  hiredis/lib/libhiredis.a
# It defines what the find_package block of CMakeLists.txt defines otherwise:
# the target LLVM (which lazyjit_lowering links), LLVM_INCLUDE_DIRS,
# LLVM_DEFINITIONS, LLVM_LIBRARY_DIR, TBB::tbb, XXHASH_INCLUDE_DIR,
# HIREDIS_INCLUDE_DIR and HIREDIS_LIBRARY, and looks at none of the system's
# copies of these four (Debian's LLVMExports.cmake would want every LLVM
# library file, so no LLVMConfig.cmake is used).
get_filename_component(_deps "${LAZYJIT_DEPS_PREFIX}" ABSOLUTE)
if(NOT EXISTS "${_deps}/llvm/lib/llvm-libs.txt")
  message(FATAL_ERROR "LAZYJIT_DEPS_PREFIX=${_deps} has no llvm/lib/llvm-libs.txt: "
                      "unpack .device/deps.tar.xz there (scripts/device/pack.sh makes it)")
endif()
message(STATUS "lazyjit: LLVM, oneTBB, xxHash and hiredis from ${_deps}")

# LLVM: an INTERFACE target of the static archives, in llvm-config's order.
file(STRINGS "${_deps}/llvm/lib/llvm-libs.txt" _llvm_archives)
set(_llvm_libs)
set(_llvm_names)
foreach(_a IN LISTS _llvm_archives)
  if(NOT EXISTS "${_deps}/llvm/lib/${_a}")
    message(FATAL_ERROR "LAZYJIT_DEPS_PREFIX: ${_deps}/llvm/lib/${_a} is missing")
  endif()
  list(APPEND _llvm_libs "${_deps}/llvm/lib/${_a}")
  list(APPEND _llvm_names "${_a}")
endforeach()
# What the archives need of the system (llvm-config-19 --system-libs, less
# z3 and libxml2, which only parts lazyjit does not use call). zlib and zstd
# by their run-time names where the development symlink is missing.
find_library(LAZYJIT_DEPS_ZLIB NAMES z libz.so.1 REQUIRED)
find_library(LAZYJIT_DEPS_ZSTD NAMES zstd libzstd.so.1 REQUIRED)
list(JOIN _llvm_names ":" _llvm_names)
add_library(LLVM INTERFACE IMPORTED GLOBAL)
# --exclude-libs: LLVM's symbols stay inside liblazyjit.so, out of its dynamic
# symbol table, so they cannot meet another LLVM loaded in the same process.
set_target_properties(LLVM PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${_deps}/llvm/include"
  INTERFACE_LINK_LIBRARIES "-Wl,--exclude-libs,${_llvm_names};${_llvm_libs};${LAZYJIT_DEPS_ZLIB};${LAZYJIT_DEPS_ZSTD};rt;dl;m;pthread")
set(LLVM_INCLUDE_DIRS "${_deps}/llvm/include")
set(LLVM_DEFINITIONS "-D_GNU_SOURCE -D__STDC_CONSTANT_MACROS -D__STDC_FORMAT_MACROS -D__STDC_LIMIT_MACROS")
set(LLVM_LIBRARY_DIR "${_deps}/tbb/lib")   # cmake/install.cmake's INSTALL_RPATH: libtbb is the one shared library
set(LLVM_PACKAGE_VERSION "")
if(EXISTS "${_deps}/llvm/version.txt")
  file(STRINGS "${_deps}/llvm/version.txt" LLVM_PACKAGE_VERSION LIMIT_COUNT 1)
endif()

# oneTBB: Debian's shared library, found next to the build through CMake's build RPATH.
add_library(TBB::tbb SHARED IMPORTED GLOBAL)
set_target_properties(TBB::tbb PROPERTIES
  IMPORTED_LOCATION "${_deps}/tbb/lib/libtbb.so.12"
  IMPORTED_SONAME "libtbb.so.12"
  INTERFACE_INCLUDE_DIRECTORIES "${_deps}/tbb/include")

set(XXHASH_INCLUDE_DIR "${_deps}/xxhash/include")
set(HIREDIS_INCLUDE_DIR "${_deps}/hiredis/include")
set(HIREDIS_LIBRARY "${_deps}/hiredis/lib/libhiredis.a")
foreach(_f "${_deps}/tbb/lib/libtbb.so.12" "${XXHASH_INCLUDE_DIR}/xxhash.h"
           "${HIREDIS_INCLUDE_DIR}/hiredis/hiredis.h" "${HIREDIS_LIBRARY}")
  if(NOT EXISTS "${_f}")
    message(FATAL_ERROR "LAZYJIT_DEPS_PREFIX: ${_f} is missing")
  endif()
endforeach()
