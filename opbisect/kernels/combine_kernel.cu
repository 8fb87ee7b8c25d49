// GPU kernels of the deterministic combine (see combine.h). Seven launches, none waiting for the host:
// iota, CUB's stable radix sort of (key, position), run heads, CUB's inclusive sum of the heads (each position's
// run number), the distinct keys and run starts, the segment sums, the run sums. Integer work is exact, and
// every float add has a fixed place in a fixed order, so the bits do not depend on scheduling.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "combine.h"

namespace opbisect {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float ToAcc(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToAcc(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToAcc(float x) { return x; }
__device__ __forceinline__ double ToAcc(double x) { return x; }

template <typename T, typename A>
__device__ __forceinline__ T FromAcc(A x) { return static_cast<T>(x); }
template <>
__device__ __forceinline__ __half FromAcc<__half, float>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromAcc<__nv_bfloat16, float>(float x) { return __float2bfloat16_rn(x); }

template <typename T> struct AccOf { using type = T; };
template <> struct AccOf<__half> { using type = float; };
template <> struct AccOf<__nv_bfloat16> { using type = float; };

__global__ void Iota(int32_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = static_cast<int32_t>(i);
}

__global__ void Heads(const int32_t* sorted, int32_t* heads, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    heads[i] = (i == 0 || sorted[i] != sorted[i - 1]) ? 1 : 0;
}

// distinct[r] and starts[r] for each run r; every slot past the last run gets `pad`. runs[i] is the 1-based run
// of sorted position i, so runs[n - 1] is the number of runs.
__global__ void Mark(const int32_t* sorted, const int32_t* heads, const int32_t* runs, int64_t n, int32_t pad,
                     int32_t* distinct, int32_t* starts) {
  const int64_t total = runs[n - 1];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    if (i >= total) distinct[i] = pad;
    if (heads[i]) {
      distinct[runs[i] - 1] = sorted[i];
      starts[runs[i] - 1] = static_cast<int32_t>(i);
    }
  }
}

__device__ __forceinline__ int64_t RunEnd(const int32_t* starts, int64_t run, int64_t total, int64_t n) {
  return run + 1 < total ? starts[run + 1] : n;
}

// One thread row (threadIdx.y) per sorted position p; the threads of a row share the columns. A position that
// starts a segment (a new key, or a multiple of kCombineChunk) adds its segment's rows in order into part[p].
template <typename T, typename A>
__global__ void SumSegments(const T* rows, const int32_t* perm, const int32_t* heads, const int32_t* runs,
                            const int32_t* starts, int64_t n, int64_t d, A* part) {
  const int64_t p = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (p >= n || (p % kCombineChunk != 0 && !heads[p])) return;
  const int64_t end = min(RunEnd(starts, runs[p] - 1, runs[n - 1], n), (p / kCombineChunk + 1) * kCombineChunk);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    A acc = A(0);
    for (int64_t q = p; q < end; ++q) acc += ToAcc(rows[int64_t{perm[q]} * d + c]);
    part[p * d + c] = acc;
  }
}

// One thread row per run r: the run's segment sums (at its start, then at each chunk boundary inside it) added
// in order; the slots past the last run get zeros.
template <typename T, typename A>
__global__ void SumRuns(const A* part, const int32_t* runs, const int32_t* starts, int64_t n, int64_t d, T* sums) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= n) return;
  const int64_t total = runs[n - 1];
  const int64_t begin = r < total ? starts[r] : 0;
  const int64_t end = r < total ? RunEnd(starts, r, total, n) : 0;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    A acc = A(0);
    if (r < total) {
      acc += part[begin * d + c];
      for (int64_t k = (begin / kCombineChunk + 1) * kCombineChunk; k < end; k += kCombineChunk) acc += part[k * d + c];
    }
    sums[r * d + c] = FromAcc<T, A>(acc);
  }
}

size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

struct Scratch {
  int32_t *sorted, *perm_in, *perm, *heads, *runs, *starts;
  void* part;
  void* cub;
  size_t cub_bytes;
};

size_t AccSize(int type) { return type == kCombineF64 ? sizeof(double) : sizeof(float); }

size_t CubBytes(int64_t n) {
  size_t sort_bytes = 0, scan_bytes = 0;
  const int items = static_cast<int>(n);
  cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), items);
  cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, static_cast<const int32_t*>(nullptr),
                                static_cast<int32_t*>(nullptr), items);
  return sort_bytes > scan_bytes ? sort_bytes : scan_bytes;
}

Scratch Carve(void* base, int64_t n, int64_t d, int type) {
  char* at = static_cast<char*>(base);
  auto take = [&](size_t bytes) { void* p = at; at += Aligned(bytes); return p; };
  Scratch s;
  s.sorted = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.perm_in = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.perm = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.heads = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.runs = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.starts = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.part = take(n * d * AccSize(type));
  s.cub_bytes = CubBytes(n);
  s.cub = take(s.cub_bytes);
  return s;
}

template <typename T>
int SumAll(const Scratch& s, const void* rows, int64_t n, int64_t d, void* sums, cudaStream_t stream) {
  using A = typename AccOf<T>::type;
  int x = 1;  // threads across the columns: the columns' count, rounded up to a power of two, at most 128
  while (x < d && x < 128) x *= 2;
  const dim3 block(x, kThreads / x);
  const unsigned grid = static_cast<unsigned>((n + block.y - 1) / block.y);
  A* part = static_cast<A*>(s.part);
  SumSegments<T, A><<<grid, block, 0, stream>>>(static_cast<const T*>(rows), s.perm, s.heads, s.runs, s.starts, n,
                                                d, part);
  SumRuns<T, A><<<grid, block, 0, stream>>>(part, s.runs, s.starts, n, d, static_cast<T*>(sums));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

size_t CombineScratchBytes(int64_t n, int64_t d, int type) {
  return 6 * Aligned(n * sizeof(int32_t)) + Aligned(n * d * AccSize(type)) + Aligned(CubBytes(n));
}

int LaunchCombine(int type, const int32_t* keys, const void* rows, int64_t n, int64_t d, int32_t pad,
                  int32_t* distinct, void* sums, void* scratch, size_t scratch_bytes, void* raw_stream) {
  if (scratch_bytes < CombineScratchBytes(n, d, type)) return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t stream = static_cast<cudaStream_t>(raw_stream);
  const Scratch s = Carve(scratch, n, d, type);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  Iota<<<grid, kThreads, 0, stream>>>(s.perm_in, n);
  size_t cub_bytes = s.cub_bytes;
  cudaError_t err = cub::DeviceRadixSort::SortPairs(s.cub, cub_bytes, keys, s.sorted, s.perm_in, s.perm,
                                                    static_cast<int>(n), 0, 32, stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  Heads<<<grid, kThreads, 0, stream>>>(s.sorted, s.heads, n);
  cub_bytes = s.cub_bytes;
  err = cub::DeviceScan::InclusiveSum(s.cub, cub_bytes, s.heads, s.runs, static_cast<int>(n), stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  Mark<<<grid, kThreads, 0, stream>>>(s.sorted, s.heads, s.runs, n, pad, distinct, s.starts);
  switch (type) {
    case kCombineF32: return SumAll<float>(s, rows, n, d, sums, stream);
    case kCombineF64: return SumAll<double>(s, rows, n, d, sums, stream);
    case kCombineF16: return SumAll<__half>(s, rows, n, d, sums, stream);
    default: return SumAll<__nv_bfloat16>(s, rows, n, d, sums, stream);
  }
}

}  // namespace opbisect
