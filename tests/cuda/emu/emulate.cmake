# The CUDA backend built for the emulated device (Note [CUDA emulation] in tests/cuda/emu/emu.h).
#
# mixtape_add_emulated_cuda(target): a static library of cuda/*.cu compiled as C++ for the host,
# with the emulated runtime. Each .cu and .cuh is copied into the build tree with two rewrites
# that C++ needs, and nothing else changed:
#   kernel<<<cfg>>>(args)  ->  ::mt_emu::launch(::mt_emu::Config(cfg).named("kernel", __func__),
#                                                [&](auto&&... a) { kernel(a...); })(args)
#   extern __shared__ T name[];  ->  T* name = static_cast<T*>(::mt_emu::dynamic_shared());
#   __shared__ T name[N];        ->  the same, then a call that registers it, so that each block
#                                    starts with garbage in it (runtime.cpp)
# The copies are refreshed whenever CMake runs; the sources are configure dependencies, so
# editing a kernel re-runs CMake before the build.
#
# Every memory access of the copies (kernels, and the host code beside them) is checked
# (Note [Device memory checks] in runtime.cpp): GCC's kernel AddressSanitizer instrumentation,
# with every check a call, calls __asan_{load,store}N_noabort(address) before each load and
# store, and runtime.cpp defines those functions. MIXTAPE_EMU_CHECK_FLAGS is also what
# tests/CMakeLists.txt compiles the emulator's own tests with, so their planted kernels are
# checked the same way.
set(MIXTAPE_EMU_CHECK_FLAGS -fsanitize=kernel-address --param=asan-instrumentation-with-call-threshold=0
                            --param=asan-stack=0 --param=asan-globals=0)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  set(MIXTAPE_EMU_CHECK_FLAGS -fsanitize=kernel-address -mllvm -asan-instrumentation-with-call-threshold=0
                              -mllvm -asan-stack=0 -mllvm -asan-globals=0)
endif()

option(MIXTAPE_EMU_UCONTEXT "emulated CUDA device: switch fibers with POSIX ucontext (the path of CPUs other than x86-64)" OFF)

function(mixtape_add_emulated_cuda target)
  set(src ${PROJECT_SOURCE_DIR})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/emulated)
  file(GLOB kernels CONFIGURE_DEPENDS ${src}/cuda/*.cu ${src}/cuda/*.cuh)
  set(compiled)
  foreach(path ${kernels})
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${path})
    file(READ ${path} text)
    # kernel: a name, optional template arguments, optional ::member (Kernel<true, false>::fn).
    string(REGEX REPLACE
           "([A-Za-z_][A-Za-z_0-9:]*(<[^<>;]*>)?(::[A-Za-z_][A-Za-z_0-9]*)?)[ \t\r\n]*<<<([^>]*)>>>"
           "::mt_emu::launch(::mt_emu::Config(\\4).named(\"\\1\", __func__), [&](auto&&... mt_args) { \\1(mt_args...); })"
           text "${text}")
    string(REGEX REPLACE "extern __shared__ ([^;[]*[^ ;[]) +([A-Za-z_0-9]+)\\[\\];"
           "\\1* \\2 = static_cast<\\1*>(::mt_emu::dynamic_shared());" text "${text}")
    string(REGEX REPLACE "__shared__ ([^;\n]*[^A-Za-z_0-9;\n])([A-Za-z_][A-Za-z_0-9]*)(\\[[^;\n]*\\])?;"
           "__shared__ \\1\\2\\3; static const bool mt_shared_\\2 = ::mt_emu::register_shared(\\2, sizeof(\\2)); (void)mt_shared_\\2;"
           text "${text}")
    get_filename_component(name ${path} NAME)
    if(name MATCHES "\\.cu$")
      set(copy ${out}/cuda/${name}.cpp)
      list(APPEND compiled ${copy})
    else()
      set(copy ${out}/cuda/${name})
    endif()
    # Write only on change, so an unrelated re-configure does not rebuild every kernel.
    set(old "")
    if(EXISTS ${copy})
      file(READ ${copy} old)
    endif()
    if(NOT old STREQUAL text)
      file(WRITE ${copy} "${text}")
    endif()
  endforeach()
  add_library(${target} STATIC ${compiled} ${src}/tests/cuda/emu/runtime.cpp)
  set_source_files_properties(${compiled} PROPERTIES COMPILE_OPTIONS "${MIXTAPE_EMU_CHECK_FLAGS}")
  # The portable fiber switch (POSIX ucontext), which every CPU but x86-64 uses, on x86-64 too.
  if(MIXTAPE_EMU_UCONTEXT)
    set_source_files_properties(${src}/tests/cuda/emu/runtime.cpp PROPERTIES COMPILE_DEFINITIONS MIXTAPE_EMU_UCONTEXT)
  endif()
  # The rewritten headers shadow the originals; <mma.h> is the emulator's.
  target_include_directories(${target} BEFORE PRIVATE ${out} ${src}/tests/cuda/emu/include)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${src}>)
  target_link_libraries(${target} PUBLIC CUDA::toolkit Threads::Threads)
  target_compile_options(${target} PRIVATE -include ${src}/tests/cuda/emu/emu.h -ffp-contract=off
                                           -Wno-unused-parameter -Wno-ignored-attributes)
  target_compile_definitions(${target} PUBLIC MIXTAPE_WITH_CUDA=1 MIXTAPE_CUDA_EMULATED=1)
endfunction()
