// load_image_folder (data/image_folder.h) on arbitrary bytes as the one image of a folder: the
// decoders stb_image reaches, the resize to the shorter side and the centre crop. The file is
// named .png, but stb chooses its decoder from the bytes, so JPEG seeds reach the JPEG decoder.
// Inputs of odd length are read as grayscale, of even length as RGB. An image that loads must
// come out [1, C, N, N] with every value in [-1, 1].
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "data/image_folder.h"
#include "fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string folder = [] {
    const std::string dir = fuzz::scratch_dir() + "/images";
    std::filesystem::create_directory(dir);
    return dir;
  }();
  fuzz::write_input("images/input.png", data, size);
  fuzz::run_reader([&] {
    mixtape::data::ImageFolderOptions options;
    options.size = 16;  // small: the resize, not the output, is under test
    // Small too: under the sanitizers, decoding the 2^25 pixels the default allows from a header
    // of a few bytes takes longer than the fuzzer's 10 s timeout. The refusal is what is tested.
    options.max_pixels = int64_t(1) << 18;
    options.grayscale = size % 2 == 1;
    const mixtape::data::ImageFolder f = mixtape::data::load_image_folder(folder, options);
    const int64_t c = options.grayscale ? 1 : 3;
    fuzz::check(f.images.shape() == mixtape::Shape{1, c, options.size, options.size}, "wrong output shape");
    const float* px = f.images.data<float>();
    for (int64_t i = 0; i < f.images.numel(); ++i)
      fuzz::check(px[i] >= -1.0f && px[i] <= 1.0f, "a pixel outside [-1, 1] (or NaN)");
  });
  return 0;
}
