// GPU kernels of the deterministic combine and scatter (see combine.h). Six steps, none waiting for the host:
// the keys (int32; a scatter's dropped keys become the table's row count) and their positions, CUB's stable radix
// sort of (key, position) (a scatter's over only the bits its keys use), CUB's inclusive sum of the run heads (each
// position's run number), the run starts (and distinct keys) with the list of segments that need a sum of their
// own (those of runs spanning chunks), those segments' sums, then the run sums, stored (the combine) or added into
// the table's rows (the scatter). Integer work is exact, and every float add has a fixed
// place in a fixed order, so the bits do not depend on scheduling.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

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

// keys32[i]: keys[i], or `limit` where `limit` >= 0 and the key is outside [0, limit); positions[i] = i; the
// count of Mark's work list set to zero.
template <typename K>
__global__ void Start(const K* keys, int64_t n, int64_t limit, int32_t* keys32, int32_t* positions,
                      int32_t* work_count) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *work_count = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t key = keys[i];
    keys32[i] = static_cast<int32_t>(limit < 0 || (key >= 0 && key < limit) ? key : limit);
    positions[i] = static_cast<int32_t>(i);
  }
}

// Sorted position i starts a run of equal keys.
__device__ __forceinline__ bool IsHead(const int32_t* sorted, int64_t i) { return i == 0 || sorted[i] != sorted[i - 1]; }

struct HeadFlag {  // the scan's input, computed as it reads (no kernel, no buffer of flags)
  const int32_t* sorted;
  __host__ __device__ int32_t operator()(int64_t i) const {
#ifdef __CUDA_ARCH__
    return IsHead(sorted, i) ? 1 : 0;
#else
    return 0;
#endif
  }
};

// Sorted position p starts a segment whose rows SumSegments must add: a segment of a run that spans chunks. Either
// a run that began in an earlier chunk goes on at this chunk's start, or a run begins here and goes on past the
// chunk's end. (A run inside one chunk is summed by the last kernel.)
__device__ __forceinline__ bool NeedsSegmentSum(const int32_t* sorted, int64_t p, int64_t n) {
  if (!IsHead(sorted, p)) return p % kCombineChunk == 0;
  const int64_t next_chunk = (p / kCombineChunk + 1) * kCombineChunk;
  return next_chunk < n && sorted[next_chunk] == sorted[p];
}

// starts[r] for each run r, and (when `distinct` is given) distinct[r], every slot past the last run getting `pad`;
// each segment start SumSegments must sum appended to `work` (in any order: the list only hands out work, and each
// segment's sum is written to its own slot by the same adds whoever does them). runs[i] is the 1-based run of
// sorted position i, so runs[n - 1] is the number of runs.
__global__ void Mark(const int32_t* sorted, const int32_t* runs, int64_t n, int32_t pad, int32_t* distinct,
                     int32_t* starts, int32_t* work, int32_t* work_count) {
  const int64_t total = runs[n - 1];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    if (distinct != nullptr && i >= total) distinct[i] = pad;
    if (IsHead(sorted, i)) {
      if (distinct != nullptr) distinct[runs[i] - 1] = sorted[i];
      starts[runs[i] - 1] = static_cast<int32_t>(i);
    }
    if (NeedsSegmentSum(sorted, i, n)) work[atomicAdd(work_count, 1)] = static_cast<int32_t>(i);
  }
}

__device__ __forceinline__ int64_t RunEnd(const int32_t* starts, int64_t run, int64_t total, int64_t n) {
  return run + 1 < total ? starts[run + 1] : n;
}

__device__ __forceinline__ bool OneChunk(int64_t begin, int64_t end) {
  return begin / kCombineChunk == (end - 1) / kCombineChunk;
}

// The rows at sorted positions [from, to), column c, added in order from zero. Eight loads are issued before
// their adds (the adds stay in order): one thread adds up to kCombineChunk rows, and one load at a time would
// leave it waiting on memory for each.
template <typename T, typename A>
__device__ __forceinline__ A SumRows(const T* rows, const int32_t* perm, int64_t from, int64_t to, int64_t d,
                                     int64_t c) {
  A acc = A(0);
  int64_t q = from;
  for (; q + 8 <= to; q += 8) {
    A v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = ToAcc(rows[int64_t{perm[q + k]} * d + c]);
#pragma unroll
    for (int k = 0; k < 8; ++k) acc += v[k];
  }
  for (; q < to; ++q) acc += ToAcc(rows[int64_t{perm[q]} * d + c]);
  return acc;
}

// One thread row (threadIdx.y) per segment on Mark's work list, its rows added in order into part[p] (p: the
// segment's first sorted position), the threads of a row sharing the columns. A grid for the longest possible
// list (two segments a chunk), each row striding over it: the list is short, so most rows have nothing to do.
template <typename T, typename A>
__global__ void SumSegments(const T* rows, const int32_t* perm, const int32_t* runs, const int32_t* starts,
                            const int32_t* work, const int32_t* work_count, int64_t n, int64_t d, A* part) {
  const int64_t total = runs[n - 1], items = *work_count;
  for (int64_t w = blockIdx.x * int64_t{blockDim.y} + threadIdx.y; w < items; w += int64_t{gridDim.x} * blockDim.y) {
    const int64_t p = work[w];
    const int64_t end = min(RunEnd(starts, runs[p] - 1, total, n), (p / kCombineChunk + 1) * kCombineChunk);
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) part[p * d + c] = SumRows<T, A>(rows, perm, p, end, d, c);
  }
}

// Run r's sum, column c: its segment sums (at its start, then at each chunk boundary inside it) added in order
// from zero; a run inside one chunk, its rows added in order from zero (the same bits: zero plus a sum that
// started from zero is that sum).
template <typename T, typename A>
__device__ __forceinline__ A RunSum(const T* rows, const int32_t* perm, const A* part, const int32_t* starts,
                                    int64_t r, int64_t total, int64_t n, int64_t d, int64_t c) {
  const int64_t begin = starts[r], end = RunEnd(starts, r, total, n);
  if (OneChunk(begin, end)) return SumRows<T, A>(rows, perm, begin, end, d, c);
  A acc = A(0);
  acc += part[begin * d + c];
  int64_t k = (begin / kCombineChunk + 1) * kCombineChunk;
  for (; k + 8 * kCombineChunk <= end; k += 8 * kCombineChunk) {  // a hot key's many segments: loads ahead, as above
    A v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = part[(k + j * kCombineChunk) * d + c];
#pragma unroll
    for (int j = 0; j < 8; ++j) acc += v[j];
  }
  for (; k < end; k += kCombineChunk) acc += part[k * d + c];
  return acc;
}

// Each thread row strides over the runs r (a grid sized to the GPU, not to n: most of n's slots may be past the
// last run): its sum stored; the slots past the last run get zeros.
template <typename T, typename A>
__global__ void SumRuns(const T* rows, const int32_t* perm, const A* part, const int32_t* runs,
                        const int32_t* starts, int64_t n, int64_t d, T* sums) {
  const int64_t total = runs[n - 1];
  for (int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y; r < n; r += int64_t{gridDim.x} * blockDim.y) {
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
      sums[r * d + c] = FromAcc<T, A>(r < total ? RunSum<T, A>(rows, perm, part, starts, r, total, n, d, c) : A(0));
  }
}

// Each thread row strides over the runs r: its sum, rounded to T, added into (or taken from) its key's row of the
// table, in T's arithmetic, as TensorFlow adds two tensors of T. The dropped keys' run (key table_rows) writes
// nothing.
template <typename T, typename A>
__global__ void AddRuns(const T* rows, const int32_t* perm, const A* part, const int32_t* sorted,
                        const int32_t* runs, const int32_t* starts, int64_t n, int64_t d, int64_t table_rows,
                        bool subtract, T* table) {
  const int64_t total = runs[n - 1];
  for (int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y; r < total; r += int64_t{gridDim.x} * blockDim.y) {
    const int64_t key = sorted[starts[r]];
    if (key >= table_rows) continue;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      const A sum = ToAcc(FromAcc<T, A>(RunSum<T, A>(rows, perm, part, starts, r, total, n, d, c)));
      const A old = ToAcc(table[key * d + c]);
      table[key * d + c] = FromAcc<T, A>(subtract ? old - sum : old + sum);
    }
  }
}

// The bits a sort must look at for keys in [0, limit]: each onesweep pass sorts 8 of them, and a pass with its
// counters' reset is a tenth of the scatter's device time. Without a limit the keys may be negative: all 32.
int KeyBits(int64_t limit) {
  if (limit < 0) return 32;
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) <= limit) ++bits;
  return bits;
}

auto HeadFlags(const int32_t* sorted) {
  return thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), HeadFlag{sorted});
}

size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

struct Scratch {
  int32_t *keys, *sorted, *perm_in, *perm, *runs, *starts;
  int32_t *work, *work_count;  // Mark's list of the segments SumSegments sums, and its length
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
  cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, HeadFlags(nullptr), static_cast<int32_t*>(nullptr), items);
  return sort_bytes > scan_bytes ? sort_bytes : scan_bytes;
}

// The scratch besides CUB's: six int32 buffers of n (keys, sorted keys, two permutations, runs, starts), the work
// list and its count, and the segment sums.
size_t FixedBytes(int64_t n, int64_t d, int type) {
  return 7 * Aligned(n * sizeof(int32_t)) + Aligned(sizeof(int32_t)) + Aligned(n * d * AccSize(type));
}

// `bytes`: what CombineScratchBytes gave, whose rest after FixedBytes is CUB's (its size queries are not repeated
// on every call: each asks the driver about the device; CUB itself refuses too little).
Scratch Carve(void* base, size_t bytes, int64_t n, int64_t d, int type) {
  char* at = static_cast<char*>(base);
  auto take = [&](size_t size) { void* p = at; at += Aligned(size); return p; };
  Scratch s;
  s.keys = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.sorted = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.perm_in = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.perm = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.runs = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.starts = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.work = static_cast<int32_t*>(take(n * sizeof(int32_t)));
  s.work_count = static_cast<int32_t*>(take(sizeof(int32_t)));
  s.part = take(n * d * AccSize(type));
  s.cub_bytes = bytes - FixedBytes(n, d, type);
  s.cub = at;
  return s;
}

// The threads of a block: x across the columns (their count rounded up to a power of two, at most 128), y rows.
dim3 Block(int64_t d) {
  int x = 1;
  while (x < d && x < 128) x *= 2;
  return dim3(x, kThreads / x);
}

// The first four steps: the keys sorted, their runs numbered, each run's start (and key, into `distinct`) marked.
// `limit` >= 0: keys outside [0, limit) become `limit` (and sort last).
template <typename K>
cudaError_t Order(const Scratch& s, const K* keys, int64_t n, int64_t limit, int32_t pad, int32_t* distinct,
                  cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  Start<K><<<grid, kThreads, 0, stream>>>(keys, n, limit, s.keys, s.perm_in, s.work_count);
  size_t cub_bytes = s.cub_bytes;
  // Keys in [0, 2^bits): their two's-complement low bits order them (CUB flips only the sign bit of an int).
  cudaError_t err = cub::DeviceRadixSort::SortPairs(s.cub, cub_bytes, s.keys, s.sorted, s.perm_in, s.perm,
                                                    static_cast<int>(n), 0, KeyBits(limit), stream);
  if (err != cudaSuccess) return err;
  cub_bytes = s.cub_bytes;
  err = cub::DeviceScan::InclusiveSum(s.cub, cub_bytes, HeadFlags(s.sorted), s.runs, static_cast<int>(n), stream);
  if (err != cudaSuccess) return err;
  Mark<<<grid, kThreads, 0, stream>>>(s.sorted, s.runs, n, pad, distinct, s.starts, s.work, s.work_count);
  return cudaGetLastError();
}

// Blocks for thread rows that stride over the runs: enough to fill the GPU (a few blocks per multiprocessor), not
// one row per key, since most keys may share a run and their blocks would only start and return.
constexpr int64_t kMaxRunBlocks = 2048;

// The last two stages: the segment sums, then each run's sum stored into `sums` or, when `table` is given, added
// into the table.
template <typename T>
int SumAll(const Scratch& s, const void* rows, int64_t n, int64_t d, void* sums, int64_t table_rows, bool subtract,
           void* table, cudaStream_t stream) {
  using A = typename AccOf<T>::type;
  const dim3 block = Block(d);
  const int64_t most_segments = 2 * ((n + kCombineChunk - 1) / kCombineChunk);  // NeedsSegmentSum: two a chunk
  const unsigned segment_grid = static_cast<unsigned>((most_segments + block.y - 1) / block.y);
  const unsigned run_grid = static_cast<unsigned>(std::min<int64_t>((n + block.y - 1) / block.y, kMaxRunBlocks));
  A* part = static_cast<A*>(s.part);
  const T* in = static_cast<const T*>(rows);
  SumSegments<T, A><<<segment_grid, block, 0, stream>>>(in, s.perm, s.runs, s.starts, s.work, s.work_count, n, d,
                                                        part);
  if (table == nullptr)
    SumRuns<T, A><<<run_grid, block, 0, stream>>>(in, s.perm, part, s.runs, s.starts, n, d, static_cast<T*>(sums));
  else
    AddRuns<T, A><<<run_grid, block, 0, stream>>>(in, s.perm, part, s.sorted, s.runs, s.starts, n, d, table_rows,
                                                  subtract, static_cast<T*>(table));
  return static_cast<int>(cudaGetLastError());
}

int SumTyped(int type, const Scratch& s, const void* rows, int64_t n, int64_t d, void* sums, int64_t table_rows,
             bool subtract, void* table, cudaStream_t stream) {
  switch (type) {
    case kCombineF32: return SumAll<float>(s, rows, n, d, sums, table_rows, subtract, table, stream);
    case kCombineF64: return SumAll<double>(s, rows, n, d, sums, table_rows, subtract, table, stream);
    case kCombineF16: return SumAll<__half>(s, rows, n, d, sums, table_rows, subtract, table, stream);
    default: return SumAll<__nv_bfloat16>(s, rows, n, d, sums, table_rows, subtract, table, stream);
  }
}

}  // namespace

size_t CombineScratchBytes(int64_t n, int64_t d, int type) { return FixedBytes(n, d, type) + Aligned(CubBytes(n)); }

size_t ScatterCombineScratchBytes(int64_t n, int64_t d, int type) { return CombineScratchBytes(n, d, type); }

int LaunchCombine(int type, const int32_t* keys, const void* rows, int64_t n, int64_t d, int32_t pad,
                  int32_t* distinct, void* sums, void* scratch, size_t scratch_bytes, void* raw_stream) {
  if (scratch_bytes <= FixedBytes(n, d, type)) return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t stream = static_cast<cudaStream_t>(raw_stream);
  const Scratch s = Carve(scratch, scratch_bytes, n, d, type);
  const cudaError_t err = Order(s, keys, n, -1, pad, distinct, stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  return SumTyped(type, s, rows, n, d, sums, 0, false, nullptr, stream);
}

int LaunchScatterCombine(int type, bool subtract, const void* keys, bool keys64, const void* rows, int64_t n,
                         int64_t d, int64_t table_rows, void* table, void* scratch, size_t scratch_bytes,
                         void* raw_stream) {
  if (scratch_bytes <= FixedBytes(n, d, type)) return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t stream = static_cast<cudaStream_t>(raw_stream);
  const Scratch s = Carve(scratch, scratch_bytes, n, d, type);
  const cudaError_t err = keys64 ? Order(s, static_cast<const int64_t*>(keys), n, table_rows, -1, nullptr, stream)
                                 : Order(s, static_cast<const int32_t*>(keys), n, table_rows, -1, nullptr, stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  return SumTyped(type, s, rows, n, d, nullptr, table_rows, subtract, table, stream);
}

int LaunchCopy(void* to, const void* from, size_t bytes, void* stream) {
  return static_cast<int>(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice,
                                          static_cast<cudaStream_t>(stream)));
}

}  // namespace opbisect
