// Folders of PNG/JPEG images (decoded with stb_image) as one f32 tensor, and PNG sample grids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace mixtape::data {

struct ImageFolderOptions {
  int64_t size = 64;                      // output N: shorter side resized to N, then the centre N x N crop
                                          // (longer side truncated, crop offset rounded half up)
  bool grayscale = false;                 // 1 channel (stb's luma) instead of RGB
  bool recursive = false;                 // descend into sub-folders
  bool skip_unreadable = false;           // skip files stb cannot decode (counted) instead of throwing
  int64_t limit = -1;                     // keep the first `limit` images in path order (-1: all)
  int64_t max_pixels = int64_t(1) << 25;  // larger images (width x height) are refused before
                                          // decoding: a JPEG header of a few bytes can declare
                                          // 55811 x 8209 pixels (1.4 GB of RGB, 5.5 GB as floats)
};

struct ImageFolder {
  Tensor images;                             // f32 [M, C, N, N] in [-1, 1], C = 3 (RGB) or 1
  std::vector<std::string> paths;            // the file of each image, sorted
  int64_t skipped = 0;                       // unreadable files skipped (skip_unreadable only)
  std::vector<std::string> skipped_reasons;  // "path: stb's reason", one per skipped file
};

// Every `.png`, `.jpg`, `.jpeg` (any case) under `dir`, in sorted path order; a file must hold PNG
// or JPEG bytes (stb_image would guess other formats from the bytes; Note [Bytes that reach
// stb_image] in image_folder.cpp says why it is not asked to). Alpha is dropped
// (stb composites nothing: RGB values are kept as stored). Resizing uses stb_image_resize
// (Mitchell filter down, Catmull-Rom up, clamped edges, linear colour); results are clamped to
// [0, 1] before the map x -> 2x - 1. Throws naming the file and stb's reason when a file cannot
// be decoded (unless skip_unreadable), and when the folder holds no images.
ImageFolder load_image_folder(const std::string& dir, const ImageFolderOptions& options = {});

// Tiles images [M, C, H, W] (C = 1 or 3, any float dtype and device, values in [-1, 1], clamped;
// NaN prints as -1) into a rows x cols grid with `padding` pixels between and around tiles,
// filled with `pad_value`, and writes it as a PNG. M <= rows * cols; empty cells are padding.
// The file is written atomically: a temporary file in the same folder, fsync, rename.
void write_png_grid(const std::string& path, const Tensor& images, int64_t rows, int64_t cols, int64_t padding = 2,
                    double pad_value = -1.0);

}  // namespace mixtape::data
