// The fused fingerprint: one int64 digest per tensor, the same function as WeightedSumFingerprinter
// (opbisect/fingerprint.py):  sum_j  bits_j * ((2j + 1) * GOLDEN)  +  words * SIZE_MIX   (mod 2^64),
// where bits_j is the j-th word of the tensor (1, 2, 4 or 8 bytes wide, sign-extended to 64 bits).
// Integer addition wraps and commutes, so the atomics of a parallel reduction cannot change the result.
#pragma once
#include <cstdint>

namespace opbisect {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kSizeMix = 0x27D4EB2F165667C5ull;
constexpr int kBatch = 96;        // tensors per launch: the table travels as a kernel parameter (< 4 KiB)
constexpr int kChunk = 16384;     // words per block
constexpr int kThreads = 256;

struct Batch {
  const void* ptr[kBatch];
  int64_t words[kBatch];
  int64_t first_block[kBatch + 1];  // prefix sum of blocks per tensor
  int32_t width[kBatch];
  int32_t count;
};

// Launches the digests of one batch into out[0..count) on `stream` (a cudaStream_t); out must be zeroed.
// Returns a CUDA error code (0 on success).
int LaunchFingerprint(const Batch& batch, uint64_t* out, void* stream);

// Zeroes out[0..n) on `stream`; returns a CUDA error code.
int ZeroDigests(uint64_t* out, int64_t n, void* stream);

}  // namespace opbisect
