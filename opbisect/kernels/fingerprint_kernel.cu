// GPU kernel of the fused fingerprint (see fingerprint.h). One launch per batch of up to kBatch tensors:
// each block takes kChunk words of one tensor (found by binary search in the batch's block prefix sums),
// accumulates in registers, reduces across the block, and adds to the tensor's digest with one 64-bit
// integer atomic.
#include <cuda_runtime.h>

#include "fingerprint.h"

namespace opbisect {

template <typename W>
__device__ __forceinline__ uint64_t Sum(const W* p, int64_t begin, int64_t end) {
  uint64_t acc = 0;
  int64_t j = begin + threadIdx.x;
  uint64_t weight = (2ull * static_cast<uint64_t>(j) + 1ull) * kGolden;
  const uint64_t step = 2ull * kThreads * kGolden;
#pragma unroll 8
  for (; j < end; j += kThreads) {
    acc += static_cast<uint64_t>(static_cast<int64_t>(__ldg(p + j))) * weight;
    weight += step;
  }
  return acc;
}

__global__ void __launch_bounds__(kThreads) FingerprintKernel(Batch b, uint64_t* out) {
  const int64_t block = blockIdx.x;
  int lo = 0, hi = b.count - 1;  // the tensor t with first_block[t] <= block < first_block[t + 1]
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (b.first_block[mid] <= block) lo = mid; else hi = mid - 1;
  }
  const int t = lo;
  const int64_t begin = (block - b.first_block[t]) * kChunk;
  const int64_t end = min(begin + kChunk, b.words[t]);
  uint64_t acc = 0;
  switch (b.width[t]) {
    case 1: acc = Sum(static_cast<const int8_t*>(b.ptr[t]), begin, end); break;
    case 2: acc = Sum(static_cast<const int16_t*>(b.ptr[t]), begin, end); break;
    case 4: acc = Sum(static_cast<const int32_t*>(b.ptr[t]), begin, end); break;
    default: acc = Sum(static_cast<const int64_t*>(b.ptr[t]), begin, end); break;
  }
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  __shared__ uint64_t warp_sums[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    if (begin == 0) total += static_cast<uint64_t>(b.words[t]) * kSizeMix;
    atomicAdd(reinterpret_cast<unsigned long long*>(out + t), static_cast<unsigned long long>(total));
  }
}

int LaunchFingerprint(const Batch& batch, uint64_t* out, void* stream) {
  const int64_t blocks = batch.first_block[batch.count];
  if (blocks == 0) return 0;
  FingerprintKernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(batch, out);
  return static_cast<int>(cudaGetLastError());
}

int ZeroDigests(uint64_t* out, int64_t n, void* stream) {
  return static_cast<int>(cudaMemsetAsync(out, 0, n * sizeof(uint64_t), static_cast<cudaStream_t>(stream)));
}

}  // namespace opbisect
