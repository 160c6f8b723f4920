# hetserve — the optional CUDA engine.
#
# HS_CUDA (cache, from the top CMakeLists.txt): AUTO builds the engine when a CUDA compiler is
# found, ON requires one, OFF never builds it. When built, hetserve_lib gets the sources under
# src/engine/cuda/, HS_HAVE_CUDA=1, the static CUDA runtime (a binary starts and reports zero
# devices where no driver or GPU is present) and cuBLASLt. Targets: Hopper machine code (sm_90)
# plus sm_90 PTX, which newer GPUs compile at load.

string(TOUPPER "${HS_CUDA}" _hs_cuda_mode)
set(HS_CUDA_ENABLED OFF)
if(_hs_cuda_mode STREQUAL "ON" OR _hs_cuda_mode STREQUAL "AUTO")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED CMAKE_CUDA_COMPILER)
    # check_language looks on PATH; the toolkit's usual home is a fallback for CI images.
    if(NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
      find_program(_hs_nvcc nvcc)
      if(NOT _hs_nvcc)
        set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
      endif()
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(HS_CUDA_ENABLED ON)
  elseif(_hs_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "HS_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
elseif(NOT _hs_cuda_mode STREQUAL "OFF")
  message(FATAL_ERROR "HS_CUDA must be AUTO, ON or OFF (got '${HS_CUDA}')")
endif()

if(HS_CUDA_ENABLED)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual")
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)

  # The options given to hetserve_lib so far are C compiler flags (warnings, sanitizers):
  # keep them for C sources only, and give nvcc its own.
  get_target_property(_hs_opts hetserve_lib COMPILE_OPTIONS)
  if(_hs_opts)
    set(_hs_c_opts "")
    foreach(o ${_hs_opts})
      list(APPEND _hs_c_opts "$<$<COMPILE_LANGUAGE:C>:${o}>")
    endforeach()
    set_target_properties(hetserve_lib PROPERTIES COMPILE_OPTIONS "${_hs_c_opts}")
  endif()

  file(GLOB HS_CUDA_SRC CONFIGURE_DEPENDS src/engine/cuda/*.c src/engine/cuda/*.cu)
  list(FILTER HS_CUDA_SRC EXCLUDE REGEX "/kind\\.c$") # the registry entry is always built
  target_sources(hetserve_lib PRIVATE ${HS_CUDA_SRC})
  # hetserve_lib existed before CUDA was enabled, so it did not pick up the default
  set_target_properties(hetserve_lib PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
  set_source_files_properties(${HS_CUDA_SRC} PROPERTIES COMPILE_OPTIONS
    "$<$<COMPILE_LANGUAGE:C>:-O3>")
  target_compile_options(hetserve_lib PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:-O3;-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter;--Werror=all-warnings>")
  target_compile_definitions(hetserve_lib PUBLIC HS_HAVE_CUDA=1)
  target_link_libraries(hetserve_lib PUBLIC CUDA::cudart_static CUDA::cublasLt)
  # nvcc's host objects may need the C++ runtime; executables are linked by the C driver.
  target_link_libraries(hetserve_lib PUBLIC stdc++)
  # test_cuda_emu: the kernel checks of test_cuda on the CPU, the kernels compiled from their
  # own source as C++ and run by an emulator of the CUDA execution model (tests/engine/cuda_emu)
  # (not under the sanitizers: they do not follow the emulator's fiber stacks, ucontext)
  if((BUILD_TESTING OR NOT DEFINED BUILD_TESTING) AND NOT HS_SANITIZE AND NOT HS_TSAN
     AND NOT HS_FUZZ)
    enable_language(CXX)
    set(_hs_emu_dir ${CMAKE_CURRENT_LIST_DIR}/../tests/engine/cuda_emu)
    set(_hs_emu_src "")
    foreach(k attention kernels norm rotary)
      set(_in ${CMAKE_CURRENT_LIST_DIR}/../src/engine/cuda/${k}.cu)
      set(_out ${CMAKE_BINARY_DIR}/cuda_emu/${k}.emu.cpp)
      add_custom_command(OUTPUT ${_out}
        COMMAND ${CMAKE_COMMAND} -DIN=${_in} -DOUT=${_out} -P ${_hs_emu_dir}/emu_cu.cmake
        DEPENDS ${_in} ${_hs_emu_dir}/emu_cu.cmake VERBATIM)
      list(APPEND _hs_emu_src ${_out})
    endforeach()
    set(_hs_src ${CMAKE_CURRENT_LIST_DIR}/../src)
    add_library(hs_cuda_emu_kernels OBJECT ${_hs_emu_dir}/emu_rt.cpp ${_hs_emu_src})
    set_source_files_properties(${_hs_emu_src} PROPERTIES COMPILE_OPTIONS
      "-include;${_hs_emu_dir}/emu.h;-w")
    set_target_properties(hs_cuda_emu_kernels PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
    target_include_directories(hs_cuda_emu_kernels PRIVATE ${_hs_src} ${_hs_emu_dir}
      ${CUDAToolkit_INCLUDE_DIRS})
    find_package(Threads REQUIRED)
    add_executable(test_cuda_emu ${_hs_emu_dir}/driver.c ${_hs_src}/core/tensor.c
      $<TARGET_OBJECTS:hs_cuda_emu_kernels>)
    target_include_directories(test_cuda_emu PRIVATE ${_hs_src}
      ${CMAKE_CURRENT_LIST_DIR}/../tests ${CUDAToolkit_INCLUDE_DIRS})
    target_compile_options(test_cuda_emu PRIVATE ${HS_WARN})
    target_link_libraries(test_cuda_emu PRIVATE PkgConfig::CMOCKA Threads::Threads m stdc++)
    add_test(NAME test_cuda_emu COMMAND test_cuda_emu)
    set_tests_properties(test_cuda_emu PROPERTIES TIMEOUT 300)
    # test_cuda_engine_emu: test_cuda itself, whole engine (engine.c, prep.c) on the emulated
    # kernels, a host GEMM and a host runtime (tests/engine/cuda_emu): the glue between
    # stages, weights and buffers checked against the CPU engine without a GPU
    add_executable(test_cuda_engine_emu ${CMAKE_CURRENT_LIST_DIR}/../tests/engine/test_cuda.c
      ${CMAKE_CURRENT_LIST_DIR}/../tests/testutil.c ${_hs_src}/engine/cuda/engine.c
      ${_hs_src}/engine/cuda/prep.c ${_hs_emu_dir}/gemm_emu.c ${_hs_emu_dir}/runtime_emu.c
      $<TARGET_OBJECTS:hs_cuda_emu_kernels>)
    target_include_directories(test_cuda_engine_emu PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../tests)
    target_compile_definitions(test_cuda_engine_emu PRIVATE HS_CUDA_EMU=1)
    target_compile_options(test_cuda_engine_emu PRIVATE ${HS_WARN})
    target_link_libraries(test_cuda_engine_emu PRIVATE hetserve_lib PkgConfig::CMOCKA
      Threads::Threads)
    # test_conformance_emu: the conformance suite with the emulated cuda lane (by hand: minutes)
    add_executable(test_conformance_emu
      ${CMAKE_CURRENT_LIST_DIR}/../tests/engine/test_conformance.c
      ${CMAKE_CURRENT_LIST_DIR}/../tests/testutil.c ${CMAKE_CURRENT_LIST_DIR}/../tests/refmodel.c
      ${_hs_src}/engine/cuda/engine.c ${_hs_src}/engine/cuda/prep.c ${_hs_emu_dir}/gemm_emu.c
      ${_hs_emu_dir}/runtime_emu.c $<TARGET_OBJECTS:hs_cuda_emu_kernels>)
    target_include_directories(test_conformance_emu PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../tests)
    target_compile_definitions(test_conformance_emu PRIVATE HS_CUDA_EMU=1)
    target_compile_options(test_conformance_emu PRIVATE ${HS_WARN})
    target_link_libraries(test_conformance_emu PRIVATE hetserve_lib PkgConfig::CMOCKA
      Threads::Threads)
    # under ctest: every tiny family checkpoint (the whole of test_cuda runs by hand, minutes)
    add_test(NAME test_cuda_engine_emu COMMAND test_cuda_engine_emu)
    set_tests_properties(test_cuda_engine_emu PROPERTIES TIMEOUT 900 ENVIRONMENT
      "HS_SOURCE_DIR=${CMAKE_SOURCE_DIR};HS_TEST_FILTER=tiny_*;HS_CUDA_GRAPHS=0;OMP_WAIT_POLICY=passive")
  endif()
  message(STATUS "hetserve: CUDA engine ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                 "archs ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "hetserve: CUDA engine OFF")
endif()

# GPU benchmark harness (bench/gpu/): built in every configuration, so that its CPU dry run
# works on machines without CUDA too.
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/../bench/gpu/bench_engine.c)
  add_executable(bench_engine ${CMAKE_CURRENT_LIST_DIR}/../bench/gpu/bench_engine.c)
  target_compile_options(bench_engine PRIVATE ${HS_WARN})
  target_link_libraries(bench_engine PRIVATE hetserve_lib)
endif()
