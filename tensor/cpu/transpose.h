// Transposes of tiles in memory, for the copies and epilogues that turn a row-major matrix into
// its columns.
//
// Note [Transposed tiles]
// transpose_tile(src, ss, dst, ds, rows, cols) writes dst[c ds + r] = src[r ss + c] for r < rows
// and c < cols: it reads each source row along its length and writes each destination row along
// its length, in blocks held in vector registers (16 x 16 bytes, 8 x 8 floats under the "avx512"
// conversion path, else 4 x 4), with the ragged edges copied one value at a time. Only bits move,
// so every path and block size gives the same result. Callers tile their matrices so that a
// tile's rows stay in cache (Note [Transposing copies] in copy.cpp).
#pragma once

#include <cstdint>

namespace mixtape::cpu {

void transpose_tile(const uint8_t* src, int64_t ss, uint8_t* dst, int64_t ds, int64_t rows, int64_t cols);
void transpose_tile(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t cols);

}  // namespace mixtape::cpu
