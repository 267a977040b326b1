# Installing lazyjit for C++ users: `cmake --install build --prefix P` puts
#   P/lib/liblazyjit.so                        (the static layers inside)
#   P/include/lazyjit/{tracer/lazyjit.h, debug/metrics.h}   (the public API)
#   P/lib/cmake/lazyjit/lazyjitConfig{,Version}.cmake
#   P/bin/lazyjit-cache                        (the compile-cache inspection tool)
# and `find_package(lazyjit CONFIG)` gives `lazyjit::lazyjit`, whose one usage
# requirement is libtorch (found in the config with find_dependency(Torch)).
# LLVM (Debian's shared libLLVM) and oneTBB are linked PRIVATE: the library
# needs them at run time (its RUNPATH), a user's link line never names them.
# The export is written by hand, not with install(EXPORT): lazyjit links its
# static layers (graph_ir, debug, cache, lowering) PUBLIC for the in-tree tests,
# and none of them may reach a user's link line. examples/cmake_consumer/ is a
# project built against it (tests/install/cmake_consumer_test.sh).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The installed library finds the libtorch it was built against and libLLVM
# (users' programs link libtorch themselves too, through the usage requirements).
set_target_properties(lazyjit PROPERTIES INSTALL_RPATH "${TORCH_INSTALL_PREFIX}/lib;${LLVM_LIBRARY_DIR}")
install(TARGETS lazyjit LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS lazyjit-cache RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# What tracer/lazyjit.h includes from the project, and nothing else (users write
# #include "tracer/lazyjit.h", as in the tree).
install(FILES tracer/lazyjit.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lazyjit/tracer)
install(FILES debug/metrics.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lazyjit/debug)

set(LAZYJIT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/lazyjit)
set(LAZYJIT_TORCH_VERSION ${Torch_VERSION})
configure_package_config_file(cmake/lazyjitConfig.cmake.in ${CMAKE_BINARY_DIR}/lazyjitConfig.cmake
  INSTALL_DESTINATION ${LAZYJIT_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/lazyjitConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/lazyjitConfig.cmake ${CMAKE_BINARY_DIR}/lazyjitConfigVersion.cmake
  DESTINATION ${LAZYJIT_INSTALL_CMAKEDIR})

# The Python package in python/ is complete after a build: next to _C and lib/,
# the inspection tool that its `lazyjit-cache` console script runs.
add_custom_command(TARGET lazyjit-cache POST_BUILD
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_SOURCE_DIR}/python/lazyjit/bin
  COMMAND ${CMAKE_COMMAND} -E copy_if_different $<TARGET_FILE:lazyjit-cache> ${CMAKE_SOURCE_DIR}/python/lazyjit/bin/
  VERBATIM)

# The install, and a project built against it (examples/cmake_consumer).
add_test(NAME install_cmake_consumer
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/cmake_consumer_test.sh ${CMAKE_BINARY_DIR} ${TORCH_CMAKE_PREFIX})
set_tests_properties(install_cmake_consumer PROPERTIES TIMEOUT 600)
