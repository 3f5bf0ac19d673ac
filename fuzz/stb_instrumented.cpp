// Note [Instrumented stb]
// Debian's libstb is compiled without coverage counters or sanitizers, so a harness linked only
// against it would fuzz stb_image blind and miss its memory errors. The image harness compiles
// the decoders and the resizer from the same package's headers (libstb-dev ships the headers
// libstb was built from) into its own executable, where the fuzzing flags reach them; the
// executable's definitions take precedence over the shared library's, so load_image_folder runs
// this copy. Only the image harness links it; the library and its tests use libstb as always.
#define STB_IMAGE_IMPLEMENTATION
#include <stb_image.h>
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb_image_resize.h>
