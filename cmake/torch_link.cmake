# How lazyjit finds and links libtorch (included by cmake/torch.cmake). Sets
# TORCH_LIBRARIES, TORCH_INSTALL_PREFIX and LAZYJIT_TORCH_CUDA_LIBRARY
# (libtorch_cuda when this torch has CUDA and CUDA headers were found; else
# NOTFOUND), and LAZYJIT_TORCH_LINK_USED (config or direct).
#
# LAZYJIT_TORCH_LINK:
#   config  find_package(Torch): libtorch's own CMake config. For a CUDA build
#           of torch that config also sets CUDA up (FindCUDA, enable_language(CUDA),
#           CUDAToolkit, nvrtc) and stops the configure with a fatal error when
#           it cannot: no toolkit, no libcudart.so, two CUDA versions.
#   direct  torch's libraries and headers by path (torch/lib, torch/include),
#           without libtorch's config and its CUDA setup; the CUDA headers and
#           libcudart for targets/cuda/cuda_graph.cpp from the toolkit, where
#           one is found (else CUDA graphs are off).
#   auto    (default) config for a torch without CUDA. For a CUDA torch, config
#           when libtorch's config alone configures (cmake/torch_probe, run in
#           the build folder's torch_probe/ with this configure's CUDA settings),
#           else direct, with the probe's error in a warning. Either way the
#           build has torch: a CUDA setup libtorch's config refuses cannot
#           leave lazyjit built without it.
set(LAZYJIT_TORCH_LINK auto CACHE STRING "How to link libtorch: auto, config (find_package(Torch)) or direct (by path)")
set_property(CACHE LAZYJIT_TORCH_LINK PROPERTY STRINGS auto config direct)

execute_process(COMMAND ${LAZYJIT_PYTHON} -c "import os, torch
print(torch.__version__)
print(torch.version.cuda or '')
print(os.path.dirname(torch.__file__))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
  OUTPUT_VARIABLE _lj_torch OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
string(REPLACE "\n" ";" _lj_torch "${_lj_torch}")
list(GET _lj_torch 0 LAZYJIT_TORCH_VERSION)
list(GET _lj_torch 1 LAZYJIT_TORCH_CUDA_VERSION)
list(GET _lj_torch 2 _lj_torch_dir)
list(GET _lj_torch 3 _lj_torch_abi)

# libtorch's CUDA setup compiles its own probes (the GPU's arch, when
# TORCH_CUDA_ARCH_LIST is unset) at CMAKE_CUDA_STANDARD, which it takes from
# CMAKE_CXX_STANDARD (20) when unset, and CMake 3.25 has no CUDA20 for nvcc 13:
# "requires the language dialect CUDA20", a fatal error. lazyjit compiles no
# CUDA: 17 for those probes.
if(NOT DEFINED CMAKE_CUDA_STANDARD)
  set(CMAKE_CUDA_STANDARD 17)
endif()
# The CUDA settings a configure may carry (scripts/gpu_check.sh names nvcc and the toolkit).
set(_lj_cuda_args "-DCMAKE_CXX_STANDARD=${CMAKE_CXX_STANDARD}" "-DCMAKE_CUDA_STANDARD=${CMAKE_CUDA_STANDARD}")
foreach(v CMAKE_CUDA_COMPILER CMAKE_CUDA_HOST_COMPILER CUDAToolkit_ROOT CUDA_TOOLKIT_ROOT_DIR)
  if(DEFINED ${v})
    list(APPEND _lj_cuda_args "-D${v}=${${v}}")
  endif()
endforeach()

set(_lj_link "${LAZYJIT_TORCH_LINK}")
set(_lj_why "")
if(NOT _lj_link MATCHES "^(auto|config|direct)$")
  message(FATAL_ERROR "LAZYJIT_TORCH_LINK is '${_lj_link}': it must be auto, config or direct")
endif()
if(_lj_link STREQUAL "auto")
  if(LAZYJIT_TORCH_CUDA_VERSION STREQUAL "")
    set(_lj_link config)
  else()
    # Probe once per torch, CUDA settings and toolkit named in the environment;
    # the answer is kept in the cache (a re-run of cmake by ninja keeps it).
    set(_lj_key "${_lj_torch_dir}|${LAZYJIT_TORCH_VERSION}|${_lj_cuda_args}|$ENV{CUDA_HOME}|$ENV{CUDA_PATH}")
    if(NOT "${_lj_key}" STREQUAL "${LAZYJIT_TORCH_PROBE_KEY}")
      set(_lj_probe_dir ${CMAKE_BINARY_DIR}/torch_probe)
      file(REMOVE_RECURSE ${_lj_probe_dir})
      execute_process(COMMAND ${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/torch_probe -B ${_lj_probe_dir}
          -G ${CMAKE_GENERATOR} -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER} -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
          -DCMAKE_PREFIX_PATH=${TORCH_CMAKE_PREFIX} -DPython_EXECUTABLE=${LAZYJIT_PYTHON} ${_lj_cuda_args}
        RESULT_VARIABLE _lj_rc OUTPUT_VARIABLE _lj_out ERROR_VARIABLE _lj_err)
      file(WRITE ${CMAKE_BINARY_DIR}/torch_probe.log "${_lj_out}\n${_lj_err}")
      if(_lj_rc EQUAL 0)
        set(_lj_probe config)
      else()
        # The first CMake error, up to its call stack, for the warning below.
        string(FIND "${_lj_err}" "CMake Error" _lj_at)
        if(_lj_at LESS 0)
          set(_lj_at 0)
        endif()
        string(SUBSTRING "${_lj_err}" ${_lj_at} 800 _lj_first)
        string(FIND "${_lj_first}" "Call Stack" _lj_end)
        if(_lj_end GREATER 0)
          string(SUBSTRING "${_lj_first}" 0 ${_lj_end} _lj_first)
        endif()
        string(STRIP "${_lj_first}" _lj_first)
        set(_lj_probe "direct|${_lj_first}")
      endif()
      set(LAZYJIT_TORCH_PROBE "${_lj_probe}" CACHE INTERNAL "")
      set(LAZYJIT_TORCH_PROBE_KEY "${_lj_key}" CACHE INTERNAL "")
    endif()
    if(LAZYJIT_TORCH_PROBE STREQUAL "config")
      set(_lj_link config)
    else()
      set(_lj_link direct)
      string(REGEX REPLACE "^direct\\|" "" _lj_why "${LAZYJIT_TORCH_PROBE}")
      message(WARNING "lazyjit: libtorch's CMake config does not configure for this CUDA build of torch "
        "(${LAZYJIT_TORCH_VERSION}, CUDA ${LAZYJIT_TORCH_CUDA_VERSION}); linking torch's libraries directly instead. "
        "Its first error (the whole output: ${CMAKE_BINARY_DIR}/torch_probe.log):\n${_lj_why}")
    endif()
  endif()
endif()

if(_lj_link STREQUAL "config")
  find_package(Torch REQUIRED)
  find_library(LAZYJIT_TORCH_CUDA_LIBRARY torch_cuda PATHS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
  set(_lj_how "libtorch's CMake config (find_package(Torch))")
else()
  set(TORCH_INSTALL_PREFIX ${_lj_torch_dir})
  set(_lj_lib ${_lj_torch_dir}/lib)
  set(_lj_libs "")
  foreach(l torch torch_cpu c10)
    if(NOT EXISTS ${_lj_lib}/lib${l}.so)
      message(FATAL_ERROR "lazyjit: LAZYJIT_TORCH_LINK=direct, and torch ${LAZYJIT_TORCH_VERSION} has no ${_lj_lib}/lib${l}.so")
    endif()
  endforeach()
  add_library(lazyjit_torch_direct INTERFACE)
  target_include_directories(lazyjit_torch_direct SYSTEM INTERFACE ${_lj_torch_dir}/include
                             ${_lj_torch_dir}/include/torch/csrc/api/include)
  # The compile definitions libtorch's targets carry (torch_cpu's, torch_cuda's:
  # USE_DISTRIBUTED, USE_C10D_GLOO, ...), read from its exported targets.
  set(_lj_defs _GLIBCXX_USE_CXX11_ABI=${_lj_torch_abi})
  file(GLOB _lj_targets ${TORCH_CMAKE_PREFIX}/Caffe2/Caffe2Targets.cmake)
  if(_lj_targets)
    file(STRINGS ${_lj_targets} _lj_def_lines REGEX "INTERFACE_COMPILE_DEFINITIONS \"[A-Za-z0-9_;=]+\"")
    foreach(line IN LISTS _lj_def_lines)
      string(REGEX REPLACE ".*INTERFACE_COMPILE_DEFINITIONS \"([^\"]*)\".*" "\\1" d "${line}")
      list(APPEND _lj_defs ${d})
    endforeach()
    list(REMOVE_DUPLICATES _lj_defs)
  endif()
  target_compile_definitions(lazyjit_torch_direct INTERFACE ${_lj_defs})
  # As libtorch's config links them: libtorch_cpu and libtorch_cuda even where
  # nothing names their symbols (their static initializers register the
  # kernels), also under a linker that defaults to --as-needed.
  set(_lj_link_items ${_lj_lib}/libtorch.so "-Wl,--no-as-needed,${_lj_lib}/libtorch_cpu.so -Wl,--as-needed" ${_lj_lib}/libc10.so)
  set(LAZYJIT_TORCH_CUDA_LIBRARY LAZYJIT_TORCH_CUDA_LIBRARY-NOTFOUND)
  if(NOT LAZYJIT_TORCH_CUDA_VERSION STREQUAL "" AND EXISTS ${_lj_lib}/libtorch_cuda.so)
    # The CUDA headers (ATen/cuda includes cuda_runtime_api.h) and libcudart:
    # the toolkit named to this configure, $CUDA_HOME, /usr/local/cuda, then
    # the nvidia-cuda-runtime wheel beside torch (nvidia/cu13, nvidia/cuda_runtime).
    set(_lj_cuda_roots ${CUDAToolkit_ROOT} ${CUDA_TOOLKIT_ROOT_DIR} $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda)
    if(CMAKE_CUDA_COMPILER)
      get_filename_component(_lj_nvcc_root ${CMAKE_CUDA_COMPILER} DIRECTORY)
      get_filename_component(_lj_nvcc_root ${_lj_nvcc_root} DIRECTORY)
      list(INSERT _lj_cuda_roots 0 ${_lj_nvcc_root})
    endif()
    file(GLOB _lj_wheel_roots ${_lj_torch_dir}/../nvidia/cu[0-9]* ${_lj_torch_dir}/../nvidia/cuda_runtime)
    list(APPEND _lj_cuda_roots ${_lj_wheel_roots})
    find_path(LAZYJIT_CUDA_INCLUDE_DIR cuda_runtime_api.h PATHS ${_lj_cuda_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
    find_library(LAZYJIT_CUDART_LIBRARY NAMES cudart libcudart.so.13 libcudart.so.12 PATHS ${_lj_cuda_roots}
                 PATH_SUFFIXES lib64 lib NO_DEFAULT_PATH)
    if(LAZYJIT_CUDA_INCLUDE_DIR AND LAZYJIT_CUDART_LIBRARY)
      set(LAZYJIT_TORCH_CUDA_LIBRARY ${_lj_lib}/libtorch_cuda.so)
      target_include_directories(lazyjit_torch_direct SYSTEM INTERFACE ${LAZYJIT_CUDA_INCLUDE_DIR})
      list(APPEND _lj_link_items "-Wl,--no-as-needed,${_lj_lib}/libtorch_cuda.so -Wl,--as-needed"
           ${_lj_lib}/libc10_cuda.so ${LAZYJIT_CUDART_LIBRARY})
    else()
      message(WARNING "lazyjit: torch ${LAZYJIT_TORCH_VERSION} has CUDA, but no CUDA headers or libcudart were found "
        "(looked in: ${_lj_cuda_roots}); linking torch without libtorch_cuda, CUDA graphs off")
    endif()
  endif()
  target_link_libraries(lazyjit_torch_direct INTERFACE ${_lj_link_items})
  set(TORCH_LIBRARIES lazyjit_torch_direct)
  set(_lj_how "its libraries directly (${_lj_lib}), not libtorch's CMake config")
  if(LAZYJIT_TORCH_LINK STREQUAL "direct")
    string(APPEND _lj_how ": LAZYJIT_TORCH_LINK=direct")
  else()
    string(APPEND _lj_how ": the config failed its probe")
  endif()
endif()
set(LAZYJIT_TORCH_LINK_USED ${_lj_link})
if(LAZYJIT_TORCH_CUDA_VERSION STREQUAL "")
  set(_lj_cuda "no CUDA")
else()
  set(_lj_cuda "CUDA ${LAZYJIT_TORCH_CUDA_VERSION}")
endif()
message(STATUS "lazyjit torch: ${LAZYJIT_TORCH_VERSION} (${_lj_cuda}) linked through ${_lj_how}")
