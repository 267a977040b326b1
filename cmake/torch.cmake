# The layers that include libtorch: tracer, executor, the Python module, and the
# tests and examples that use them. libtorch comes from the venv's torch wheel.
set(LAZYJIT_PYTHON "${LAZYJIT_VENV}/bin/python" CACHE FILEPATH "Python whose torch lazyjit builds against")
execute_process(COMMAND ${LAZYJIT_PYTHON} -c "import torch; print(torch.utils.cmake_prefix_path)"
                OUTPUT_VARIABLE TORCH_CMAKE_PREFIX OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${LAZYJIT_PYTHON} -c "import pybind11; print(pybind11.get_cmake_dir())"
                OUTPUT_VARIABLE PYBIND11_CMAKE_DIR OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
# The Python the extension is built for, found before libtorch's config: a CUDA
# build's config runs find_package(Python COMPONENTS Interpreter) itself (its
# public/cuda.cmake), after which pybind11 takes Python as found and never
# defines python_add_library ("Unknown CMake command").
set(Python_EXECUTABLE ${LAZYJIT_PYTHON})
find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
list(APPEND CMAKE_PREFIX_PATH ${TORCH_CMAKE_PREFIX})
include(${CMAKE_CURRENT_LIST_DIR}/torch_link.cmake)
find_library(TORCH_PYTHON_LIBRARY torch_python PATHS "${TORCH_INSTALL_PREFIX}/lib" REQUIRED)

add_library(lazyjit SHARED
  bridge/aten_ir.cpp
  executor/executable.cpp executor/step_thunks.cpp executor/aten_call.cpp executor/aten_call_thunk.cpp executor/gemm.cpp executor/small_gemm.cpp executor/buffer_pool.cpp executor/store_in_place.cpp executor/op_by_op_node.cpp executor/op_by_op_thunk.cpp executor/view_thunk.cpp executor/dead_after.cpp executor/launch_thunk.cpp
  executor/collective_step.cpp executor/collective_in_flight.cpp executor/collective_thunk.cpp
  targets/cpu/kernel_launch.cpp targets/cpu/kernel_thunk.cpp
  targets/cuda/device_launch.cpp targets/cuda/module_loads.cpp targets/cuda/kernel_thunk.cpp targets/cuda_sim/sim_launch.cpp targets/cuda_sim/kernel_thunk.cpp executor/graph_replay.cpp targets/cuda/graph_replays.cpp
  runtime/config.cpp runtime/runtime.cpp runtime/backend.cpp targets/cpu/backend.cpp targets/cuda_sim/backend.cpp targets/cuda/backend.cpp runtime/pipeline.cpp runtime/disk_tier.cpp runtime/sync_tiers.cpp runtime/recompile_policy.cpp runtime/op_by_op.cpp runtime/heap_trim.cpp runtime/program_entry.cpp runtime/remote_tier.cpp runtime/recompile_explainer.cpp runtime/shape_binder.cpp runtime/traced_node.cpp runtime/background_compiles.cpp
  runtime/debug_runs/observed_run.cpp runtime/debug_runs/graph_check.cpp runtime/debug_runs/repro.cpp runtime/debug_runs/nan_check.cpp runtime/debug_runs/nan_pinning.cpp
  tracer/call_site.cpp tracer/rnn_cells.cpp tracer/attention_choice.cpp tracer/lazy_storage.cpp tracer/pinned_memory.cpp tracer/trace_context.cpp tracer/read_apart.cpp
  tracer/trace_threads.cpp tracer/input_names.cpp tracer/autograd_queue.cpp tracer/record_op.cpp tracer/op_info.cpp tracer/meta_inference.cpp tracer/meta_fast_path.cpp tracer/meta_structured.cpp tracer/aten_to_ir.cpp tracer/aten_to_ir_elementwise.cpp tracer/aten_to_ir_reductions.cpp tracer/backward_ops.cpp tracer/aten_node.cpp
  tracer/capture.cpp tracer/capture_set.cpp tracer/device_call.cpp tracer/step_mode.cpp tracer/op_events.cpp tracer/check_api.cpp tracer/device_ops.cpp tracer/storage_ops.cpp tracer/device_memory.cpp tracer/streams.cpp tracer/api.cpp
  tracer/collectives.cpp tracer/collectives_cpu.cpp tracer/collectives_functional.cpp tracer/collectives_backend.cpp)
target_compile_definitions(lazyjit PRIVATE LAZYJIT_VERSION="${PROJECT_VERSION}")
# CUDA graphs (targets/cuda/cuda_graph.h) use PyTorch's at::cuda::CUDAGraph: built
# only against a torch with CUDA (libtorch_cuda, which TORCH_LIBRARIES then links).
# LAZYJIT_CUDA_GRAPHS_BUILD=OFF builds without them even then (the GPU check's
# fallback when that translation unit fails to build: scripts/gpu_check.sh).
option(LAZYJIT_CUDA_GRAPHS_BUILD "CUDA graphs, when the torch found has CUDA" ON)
# (torch_link.cmake sets LAZYJIT_TORCH_CUDA_LIBRARY: libtorch_cuda, when this
# torch has CUDA and the CUDA headers are there to compile against.)
if(LAZYJIT_TORCH_CUDA_LIBRARY AND LAZYJIT_CUDA_GRAPHS_BUILD)
  target_sources(lazyjit PRIVATE targets/cuda/cuda_graph.cpp)
else()
  target_sources(lazyjit PRIVATE targets/cuda/cuda_graph_none.cpp)
endif()
message(STATUS "lazyjit CUDA graphs: ${LAZYJIT_TORCH_CUDA_LIBRARY} (NOTFOUND: this torch has no CUDA, or no CUDA headers were found; graphs off)")
target_link_libraries(lazyjit PUBLIC ${TORCH_LIBRARIES} lazyjit_graph_ir lazyjit_debug lazyjit_cache
                      lazyjit_lowering PRIVATE TBB::tbb nlohmann_json::nlohmann_json)
# Every symbol resolved at link time (-z defs): a symbol this torch lacks fails
# the link, naming it, instead of `import lazyjit`.
target_link_options(lazyjit PRIVATE "LINKER:-z,defs")
set_target_properties(lazyjit PROPERTIES
  BUILD_RPATH "${TORCH_INSTALL_PREFIX}/lib"
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_SOURCE_DIR}/python/lazyjit/lib)

add_executable(e2e_tests tests/e2e/device_test.cpp tests/e2e/debug_test.cpp tests/e2e/trace_test.cpp tests/e2e/sync_map_test.cpp)
target_link_libraries(e2e_tests lazyjit GTest::gtest_main nlohmann_json::nlohmann_json)
target_compile_definitions(e2e_tests PRIVATE LAZYJIT_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
set_target_properties(e2e_tests PROPERTIES BUILD_RPATH "${TORCH_INSTALL_PREFIX}/lib;${CMAKE_SOURCE_DIR}/python/lazyjit/lib")
# Tests count compiles: each process starts with no on-disk cache (the disk
# tier has tests of its own) and compiles in the foreground, at the sync that
# needs the program (tests/python/test_background_compile.py covers the worker).
# (Two variables: gtest_discover_tests would split one ENVIRONMENT list.)
gtest_discover_tests(e2e_tests DISCOVERY_MODE PRE_TEST PROPERTIES ENVIRONMENT "LAZYJIT_CACHE=off"
                     ENVIRONMENT_MODIFICATION "LAZYJIT_BACKGROUND_COMPILE=set:off")
# The compiled-vs-eager check against a fault planted in every generated mul.
add_test(NAME e2e_fault_mul COMMAND e2e_tests --gtest_filter=CheckGraphs.FindsAPlantedFault)
set_tests_properties(e2e_fault_mul PROPERTIES ENVIRONMENT "LAZYJIT_CACHE=off;LAZYJIT_BACKGROUND_COMPILE=off;LAZYJIT_FAULT=mul")
# The debug ladder from C++: LAZYJIT_DEBUG=1 logs each sync and why it compiled.
add_test(NAME e2e_debug_level1 COMMAND e2e_tests --gtest_filter=LazyHooks.*)
set_tests_properties(e2e_debug_level1 PROPERTIES ENVIRONMENT "LAZYJIT_CACHE=off;LAZYJIT_BACKGROUND_COMPILE=off;LAZYJIT_DEBUG=1"
  PASS_REGULAR_EXPRESSION "lazyjit: compiling at .*: first at this site.*lazyjit: sync at .*ops -> compiled \\(first at this site\\)"
  FAIL_REGULAR_EXPRESSION "\\[  FAILED  \\]")

add_executable(executor_tests tests/executor/program_bytes_test.cpp tests/executor/failed_step_test.cpp
               tests/executor/buffer_pool_test.cpp tests/executor/background_compiles_test.cpp
               tests/executor/small_gemm_test.cpp tests/executor/store_in_place_test.cpp
               tests/executor/cuda_driver_test.cpp tests/executor/device_launch_test.cpp
               tests/executor/graph_replay_test.cpp tests/executor/shape_binder_device_test.cpp
               tests/executor/step_thunks_test.cpp tests/executor/module_loads_test.cpp)
target_link_libraries(executor_tests lazyjit GTest::gtest_main)
# A stand-in libcuda.so.1 for cuda_driver_test (LAZYJIT_TEST_LIBCUDA): the
# driver layer's rules on contexts, error logs and captures without a GPU.
add_library(fake_libcuda SHARED tests/executor/fake_libcuda.c)
add_dependencies(executor_tests fake_libcuda)
target_compile_definitions(executor_tests PRIVATE LAZYJIT_FAKE_LIBCUDA="$<TARGET_FILE:fake_libcuda>")
set_target_properties(executor_tests PROPERTIES BUILD_RPATH "${TORCH_INSTALL_PREFIX}/lib;${CMAKE_SOURCE_DIR}/python/lazyjit/lib")
gtest_discover_tests(executor_tests DISCOVERY_MODE PRE_TEST PROPERTIES ENVIRONMENT "LAZYJIT_BACKGROUND_COMPILE=off")

# lazyjit-repro DIR: reruns a compiled-vs-eager repro (runtime/debug_runs/repro.h).
add_executable(lazyjit-repro tools/lazyjit_repro/main.cpp)
target_link_libraries(lazyjit-repro lazyjit)
set_target_properties(lazyjit-repro PROPERTIES BUILD_RPATH "${TORCH_INSTALL_PREFIX}/lib;${CMAKE_SOURCE_DIR}/python/lazyjit/lib")

add_executable(demo_cpp examples/demo.cpp)
target_link_libraries(demo_cpp lazyjit)
set_target_properties(demo_cpp PROPERTIES BUILD_RPATH "${TORCH_INSTALL_PREFIX}/lib;${CMAKE_SOURCE_DIR}/python/lazyjit/lib")

# The Python extension lazyjit._C, written next to the package sources.
set(pybind11_DIR ${PYBIND11_CMAKE_DIR})
set(PYBIND11_FINDPYTHON ON)
set(Python_EXECUTABLE ${LAZYJIT_PYTHON})
find_package(pybind11 CONFIG REQUIRED)
pybind11_add_module(lazyjit_python python/lazyjit/csrc/module.cpp python/lazyjit/csrc/autocast.cpp)
set_target_properties(lazyjit_python PROPERTIES OUTPUT_NAME _C
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_SOURCE_DIR}/python/lazyjit
  BUILD_RPATH "$ORIGIN/lib;${TORCH_INSTALL_PREFIX}/lib")
target_link_libraries(lazyjit_python PRIVATE lazyjit ${TORCH_PYTHON_LIBRARY})

add_executable(bench_trace_cost bench/trace_cost.cpp)
target_link_libraries(bench_trace_cost lazyjit)
set_target_properties(bench_trace_cost PROPERTIES BUILD_RPATH "${TORCH_INSTALL_PREFIX}/lib;${CMAKE_SOURCE_DIR}/python/lazyjit/lib")

# Kernels run on ATen's own OpenMP pool (targets/cpu/kernel_launch.cpp): the threads
# eager ops and library steps (GEMMs, attention) use, hot between steps, instead
# of a second pool fighting them for the cores. Linked to the wheel's libgomp,
# the runtime torch has already loaded (one OpenMP runtime in the process).
set_source_files_properties(targets/cpu/kernel_launch.cpp executor/small_gemm.cpp PROPERTIES COMPILE_OPTIONS "-fopenmp")
find_library(TORCH_GOMP_LIBRARY NAMES libgomp.so.1 gomp PATHS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH REQUIRED)
target_link_libraries(lazyjit PRIVATE ${TORCH_GOMP_LIBRARY})

# bench/gemv.cpp: the read bandwidth and the GEMV kernel at a decoder's shapes.
add_executable(bench_gemv bench/gemv.cpp)
set_source_files_properties(bench/gemv.cpp PROPERTIES COMPILE_OPTIONS "-fopenmp")
target_link_libraries(bench_gemv lazyjit ${TORCH_GOMP_LIBRARY})
set_target_properties(bench_gemv PROPERTIES BUILD_RPATH "${TORCH_INSTALL_PREFIX}/lib;${CMAKE_SOURCE_DIR}/python/lazyjit/lib")

# The executables that link libtorch name libstdc++ first among their libraries,
# so that their std::filesystem calls reach it: torch 2.11's CUDA wheel exports
# copies of libstdc++'s std::filesystem from libtorch.so and libtorch_cpu.so
# (pytorch/pytorch#133437), an executable's symbol lookups take the first of its
# libraries that defines one, and libtorch.so's std::filesystem::remove_all
# jumps to address 0 (e2e_fault_mul crashed so against 2.11.0+cu130).
foreach(t e2e_tests executor_tests lazyjit-repro demo_cpp bench_trace_cost bench_gemv)
  target_link_options(${t} PRIVATE "SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")
endforeach()
