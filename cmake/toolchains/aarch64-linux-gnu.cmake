# Cross-compiling for aarch64 Linux on a Debian x86-64 host (scripts/check_aarch64.sh):
# Debian's g++-aarch64-linux-gnu, the target's libraries from its multiarch arm64 packages
# (/usr/lib/aarch64-linux-gnu), and qemu-user to run what was built (ctest, the examples).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# the host's programs, the target's libraries and headers (multiarch: both under /usr)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
# One thread under qemu: Debian 12's qemu-user (7.2) spins forever in the first pthread_create of
# an aarch64 program on the hosts this was written on (OpenBLAS and libgomp start threads), so
# the programs it runs (the tests' discovery, ctest) get one OpenMP and one OpenBLAS thread.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu -E OMP_NUM_THREADS=1 -E OPENBLAS_NUM_THREADS=1)
