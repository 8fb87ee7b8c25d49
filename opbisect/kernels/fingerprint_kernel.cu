// GPU kernel of the fused fingerprint (see fingerprint.h). One launch per batch of up to kBatch tensors:
// each block takes kChunk words of one tensor (found by binary search in the batch's block prefix sums),
// accumulates in registers, reduces across the block, and adds to the tensor's digest with one 64-bit
// integer atomic. A full, aligned chunk issues its loads before its arithmetic (SumFullChunk).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

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

// The same sum with 16-byte loads: V words per load; the weight of word j0 + k is w(j0) + 2k * kGolden.
// `begin` is a multiple of kChunk, so of V; a tail shorter than one vector goes word by word.
template <typename W>
__device__ __forceinline__ uint64_t SumVectorized(const W* p, int64_t begin, int64_t end) {
  constexpr int V = 16 / sizeof(W);
  const int64_t vend = begin + ((end - begin) / V) * V;
  const uint4* pv = reinterpret_cast<const uint4*>(p);
  uint64_t acc = 0;
#pragma unroll 2
  for (int64_t v = begin / V + threadIdx.x; v < vend / V; v += kThreads) {
    const uint4 q = __ldg(pv + v);
    W words[V];
    memcpy(words, &q, sizeof(q));
    uint64_t weight = (2ull * static_cast<uint64_t>(v * V) + 1ull) * kGolden;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      acc += static_cast<uint64_t>(static_cast<int64_t>(words[k])) * weight;
      weight += 2ull * kGolden;
    }
  }
  return acc + Sum(p, vend, end);
}

// A full, 16-byte aligned chunk: each thread issues kInFlight 16-byte loads before it adds any word, so each
// thread keeps that many reads in flight (the strided loop above keeps two). On the H200 this read the BERT-like
// step's tapped outputs in 1.74 ms where the strided loop at 8192 words a block took 1.94, the same digests
// (benchmarks/fingerprint_kernel.cu, "loads first", reports/h200/shapes/profiles/fingerprint_kernel.txt).
// `Chunk` and `InFlight` are the op's own; the benchmark takes other values of them as its candidates.
constexpr int kInFlight = 16;  // 16-byte loads a thread holds at once: 64 registers

template <typename W, int Chunk = kChunk, int InFlight = kInFlight>
__device__ __forceinline__ uint64_t SumFullChunk(const W* p, int64_t begin) {
  constexpr int V = 16 / sizeof(W);
  constexpr int N = Chunk / V / kThreads;  // loads a thread makes over the chunk
  constexpr int M = N < InFlight ? N : InFlight;
  static_assert(N % M == 0, "a chunk is a whole number of rounds of loads");
  const uint4* pv = reinterpret_cast<const uint4*>(p) + begin / V + threadIdx.x;
  uint64_t acc = 0;
#pragma unroll
  for (int round = 0; round < N; round += M) {
    uint4 q[M];
#pragma unroll
    for (int i = 0; i < M; ++i) q[i] = __ldg(pv + (round + i) * kThreads);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      W words[V];
      memcpy(words, &q[i], sizeof(uint4));
      const int64_t j = begin + (threadIdx.x + static_cast<int64_t>(round + i) * kThreads) * V;
      uint64_t weight = (2ull * static_cast<uint64_t>(j) + 1ull) * kGolden;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        acc += static_cast<uint64_t>(static_cast<int64_t>(words[k])) * weight;
        weight += 2ull * kGolden;
      }
    }
  }
  return acc;
}

template <typename W>
__device__ __forceinline__ uint64_t SumAny(const void* data, int64_t begin, int64_t end) {
  const W* p = static_cast<const W*>(data);
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return Sum(p, begin, end);  // a view may start anywhere
  if (end - begin == kChunk) return SumFullChunk(p, begin);
  return SumVectorized(p, begin, end);  // a tensor's last chunk
}

// At least 3 blocks an SM: the register budget (85) under which the measured form compiled (74 registers, no spill);
// allowed 128, nvcc takes them all and fits only 2.
__global__ void __launch_bounds__(kThreads, 3) FingerprintKernel(Batch b, uint64_t* out) {
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
    case 1: acc = SumAny<int8_t>(b.ptr[t], begin, end); break;
    case 2: acc = SumAny<int16_t>(b.ptr[t], begin, end); break;
    case 4: acc = SumAny<int32_t>(b.ptr[t], begin, end); break;
    default: acc = SumAny<int64_t>(b.ptr[t], begin, end); break;
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
