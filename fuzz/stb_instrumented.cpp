// Note [Instrumented stb]
// Debian's libstb is compiled without coverage counters or sanitizers, so a harness linked only
// against it would fuzz stb_image blind and miss its memory errors. The image harness compiles
// the decoders and the resizer from the same package's headers (libstb-dev ships the headers
// libstb was built from) into its own executable, where the fuzzing flags reach them; the
// executable's definitions take precedence over the shared library's, so load_image_folder runs
// this copy. Only the image harness links it; the library and its tests use libstb as always.
//
// Two checks are off in this copy, both for stb_image bugs that only garble a corrupt file's
// pixels (fuzz/CMakeLists.txt):
//   signed integer overflow  the JPEG decoder multiplies and adds DC coefficients in int, and a
//                            corrupt file overflows them (dc * dequant[0] in
//                            stbi__jpeg_decode_block: nothings/stb issue 1533, open upstream;
//                            more in issue 1292); the shared library wraps, and this copy is
//                            compiled with -fwrapv to do the same;
//   shift                    a corrupt Huffman stream drives the bit count negative, and
//                            stbi__grow_buffer_unsafe shifts by 24 - code_bits >= 32
//                            (nothings/stb issue 1293, fixed on stb's dev branch after the
//                            version Debian ships); x86 masks the count, as the shared library
//                            does.
// So the fuzzer looks past them for the errors that matter: memory errors, hangs, huge
// allocations, and every undefined behaviour in mixtape's own code, where both checks stay on.
#define STB_IMAGE_IMPLEMENTATION
#include <stb_image.h>
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb_image_resize.h>
