// GPU kernels of the deterministic combine and scatter (see combine.h), none waiting for the host. The keys (int32;
// a scatter's dropped keys become the table's row count) and their positions; CUB's stable radix sort of
// (key, position) (a scatter's over only the bits its keys use, and up to 8,192 keys in one block); the segments of
// runs that span chunks summed, each chunk finding its own (at most two) by binary search over its sorted keys.
// Then the combine numbers the runs (CUB's inclusive sum of the run heads), marks each run's start and key, and
// stores each run's sum in run order; the scatter needs no numbering: the warps of each 32 sorted positions find
// their run heads and the runs' ends by ballot and add each run's sum into its key's row of the table (two kernels
// after the sort, where a numbering would cost three more enqueues on a host-bound step). The sort (with the
// combine's scan) is CUB's ten or so kernels and memsets: from the second call of a size in a row it is replayed as
// one CUDA graph (SortGraph). Integer work is exact, and every float add has a fixed place in a fixed order, so the
// bits do not depend on scheduling.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include <cub/block/block_radix_sort.cuh>
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

// A key as the sort sees it: the key, or `limit` where `limit` >= 0 and the key is outside [0, limit).
template <typename K>
__device__ __forceinline__ int32_t Clamped(K raw, int64_t limit) {
  const int64_t key = raw;
  return static_cast<int32_t>(limit < 0 || (key >= 0 && key < limit) ? key : limit);
}

// keys32[i]: keys[i] clamped; positions[i] = i.
template <typename K>
__global__ void Start(const K* keys, int64_t n, int64_t limit, int32_t* keys32, int32_t* positions) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    keys32[i] = Clamped(keys[i], limit);
    positions[i] = static_cast<int32_t>(i);
  }
}

// Few keys (at most kBlockSortKeys) are sorted by one block in shared memory, in one launch: CUB's device sort runs
// a histogram, a scan and one onesweep pass per 8 bits, 20 us of device time at 8,192 ids on an H100 (the segment
// sum's patch at an 8k embedding, reports/h100/shapes/lease16/profile). A stable sort of (key, position) has one
// result, so which sort ran never changes the bits after it. Slots past n get a key no smaller than any real one
// (all ones in the bits sorted), and their positions, past n, order them after the real keys.
constexpr int kSortThreads = 512, kSortItems = 16;
constexpr int64_t kBlockSortKeys = int64_t{kSortThreads} * kSortItems;

template <typename K>
__global__ void __launch_bounds__(kSortThreads) BlockSort(const K* keys, int64_t n, int64_t limit, int bits,
                                                          int32_t* sorted, int32_t* positions) {
  using Sorter = cub::BlockRadixSort<int32_t, kSortThreads, kSortItems, int32_t>;
  __shared__ typename Sorter::TempStorage temp;
  const int32_t pad = bits >= 32 ? INT32_MAX : static_cast<int32_t>((int64_t{1} << bits) - 1);
  int32_t key[kSortItems], at[kSortItems];  // blocked: thread t holds slots 16t .. 16t + 15
#pragma unroll
  for (int k = 0; k < kSortItems; ++k) {
    const int64_t i = int64_t{threadIdx.x} * kSortItems + k;
    key[k] = i < n ? Clamped(keys[i], limit) : pad;
    at[k] = static_cast<int32_t>(i);
  }
  Sorter(temp).Sort(key, at, 0, bits);
#pragma unroll
  for (int k = 0; k < kSortItems; ++k) {
    const int64_t i = int64_t{threadIdx.x} * kSortItems + k;
    if (i < n) sorted[i] = key[k], positions[i] = at[k];
  }
}

// Sorted position i starts a run of equal keys.
__device__ __forceinline__ bool IsHead(const int32_t* sorted, int64_t i) {
  return i == 0 || sorted[i] != sorted[i - 1];
}

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

// The first position in [from, to) whose key is above `key`, where sorted[from] == key and every key in
// [from, to) is at least `key`.
__device__ __forceinline__ int64_t UpperBound(const int32_t* sorted, int64_t from, int64_t to, int32_t key) {
  int64_t lo = from + 1, hi = to;  // the answer lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (sorted[mid] == key) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// The first position in [from, to] holding `key`, where sorted[to] == key.
__device__ __forceinline__ int64_t LowerBound(const int32_t* sorted, int64_t from, int64_t to, int32_t key) {
  int64_t lo = from, hi = to;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (sorted[mid] == key) hi = mid; else lo = mid + 1;
  }
  return lo;
}

// The end of the run that starts at sorted position `head`: a galloping search (a run of length L costs about
// 2 log L loads, where a hot key's run may hold thousands of positions).
__device__ __forceinline__ int64_t RunEndFrom(const int32_t* sorted, int64_t head, int64_t n) {
  const int32_t key = sorted[head];
  int64_t step = 1;
  while (head + step < n && sorted[head + step] == key) step *= 2;
  return UpperBound(sorted, head + step / 2, min(head + step, n), key);
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

template <typename T, typename A>
__device__ __forceinline__ void StoreSegment(const T* rows, const int32_t* perm, int64_t from, int64_t to,
                                             int64_t d, A* part) {
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) part[from * d + c] = SumRows<T, A>(rows, perm, from, to, d, c);
}

// The sums of the segments of runs that span chunks, each into part[p] (p: the segment's first sorted position).
// One thread row (threadIdx.y) per chunk, whose threads share the columns. A chunk holds at most two such
// segments: at its start, the rest of a run that began in an earlier chunk or a run that goes on past the chunk's
// end; and the start of a run that begins later in the chunk and goes on past its end. (A run inside one chunk is
// summed by the last kernel.)
template <typename T, typename A>
__global__ void SumSegments(const T* rows, const int32_t* perm, const int32_t* sorted, int64_t n, int64_t d,
                            A* part) {
  const int64_t chunks = (n + kCombineChunk - 1) / kCombineChunk;
  for (int64_t k = blockIdx.x * int64_t{blockDim.y} + threadIdx.y; k < chunks; k += int64_t{gridDim.x} * blockDim.y) {
    const int64_t begin = k * kCombineChunk, end = min(begin + kCombineChunk, n);
    const bool goes_on = end < n && sorted[end] == sorted[end - 1];  // the chunk's last run continues past it
    if (!IsHead(sorted, begin) || (goes_on && sorted[begin] == sorted[end - 1]))
      StoreSegment<T, A>(rows, perm, begin, UpperBound(sorted, begin, end, sorted[begin]), d, part);
    if (goes_on && sorted[begin] != sorted[end - 1])
      StoreSegment<T, A>(rows, perm, LowerBound(sorted, begin, end - 1, sorted[end - 1]), end, d, part);
  }
}

// The sum of the run at sorted positions [begin, end), column c: its segment sums (at its start, then at each
// chunk boundary inside it) added in order from zero; a run inside one chunk, its rows added in order from zero
// (the same bits: zero plus a sum that started from zero is that sum).
template <typename T, typename A>
__device__ __forceinline__ A RunSum(const T* rows, const int32_t* perm, const A* part, int64_t begin, int64_t end,
                                    int64_t d, int64_t c) {
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

// The combine's numbering: starts[r] for each run r, and distinct[r], every slot past the last run getting `pad`.
// runs[i] is the 1-based run of sorted position i, so runs[n - 1] is the number of runs.
__global__ void Mark(const int32_t* sorted, const int32_t* runs, int64_t n, int32_t pad, int32_t* distinct,
                     int32_t* starts) {
  const int64_t total = runs[n - 1];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    if (i >= total) distinct[i] = pad;
    if (IsHead(sorted, i)) {
      distinct[runs[i] - 1] = sorted[i];
      starts[runs[i] - 1] = static_cast<int32_t>(i);
    }
  }
}

// Each thread row strides over the runs r (a grid sized to the GPU, not to n: most of n's slots may be past the
// last run): its sum stored; the slots past the last run get zeros.
template <typename T, typename A>
__global__ void SumRuns(const T* rows, const int32_t* perm, const A* part, const int32_t* runs,
                        const int32_t* starts, int64_t n, int64_t d, T* sums) {
  const int64_t total = runs[n - 1];
  for (int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y; r < n; r += int64_t{gridDim.x} * blockDim.y) {
    const int64_t begin = r < total ? starts[r] : 0, end = r + 1 < total ? starts[r + 1] : n;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
      sums[r * d + c] = FromAcc<T, A>(r < total ? RunSum<T, A>(rows, perm, part, begin, end, d, c) : A(0));
  }
}

// RunSum for a lane's kColumns columns c0, c0 + 32, ... at once (those below d; the others add zeros and are not
// stored): each column's adds in RunSum's order, the columns' loads issued together, since a run's sum is a chain
// of dependent loads and the kernel's time is how many such chains run at once.
constexpr int kColumns = 4;

template <typename T, typename A>
__device__ __forceinline__ void RunSums(const T* rows, const int32_t* perm, const A* part, int64_t begin,
                                        int64_t end, int64_t d, int64_t c0, A (&acc)[kColumns]) {
  auto at = [&](int64_t base, int k) { return c0 + k * 32 < d ? base + c0 + k * 32 : -1; };
#pragma unroll
  for (int k = 0; k < kColumns; ++k) acc[k] = A(0);
  if (OneChunk(begin, end)) {
    int64_t q = begin;
    for (; q + 4 <= end; q += 4) {
      A v[4][kColumns];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t base = int64_t{perm[q + j]} * d;
#pragma unroll
        for (int k = 0; k < kColumns; ++k) v[j][k] = at(base, k) < 0 ? A(0) : ToAcc(rows[at(base, k)]);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int k = 0; k < kColumns; ++k) acc[k] += v[j][k];
    }
    for (; q < end; ++q) {
      const int64_t base = int64_t{perm[q]} * d;
#pragma unroll
      for (int k = 0; k < kColumns; ++k)
        if (at(base, k) >= 0) acc[k] += ToAcc(rows[at(base, k)]);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kColumns; ++k) acc[k] += at(begin * d, k) < 0 ? A(0) : part[at(begin * d, k)];
  int64_t q = (begin / kCombineChunk + 1) * kCombineChunk;  // then the segment at each chunk boundary in the run
  for (; q + 8 * kCombineChunk <= end; q += 8 * kCombineChunk) {  // a hot key's many segments: loads ahead
    A v[8][kColumns];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int k = 0; k < kColumns; ++k) {
        const int64_t x = at((q + j * kCombineChunk) * d, k);
        v[j][k] = x < 0 ? A(0) : part[x];
      }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int k = 0; k < kColumns; ++k) acc[k] += v[j][k];
  }
  for (; q < end; q += kCombineChunk) {
#pragma unroll
    for (int k = 0; k < kColumns; ++k) acc[k] += at(q * d, k) < 0 ? A(0) : part[at(q * d, k)];
  }
}

// TileWarps warps per tile of 32 sorted positions (the blocks stride over the tiles). Each warp reads the tile's keys,
// a lane each, and its ballots give the run heads and, for each, its run's end (the next head in the tile, else a
// galloping search past the tile), with no pass over positions that are not heads; the warps share the heads
// (warp w takes heads w, w + warps, ...), a lane kColumns columns. At each head, the run's sum, rounded to T, is
// added into (or taken from) its key's row of the table, in T's arithmetic, as TensorFlow adds two tensors of T. The
// dropped keys' run (key table_rows) ends the run before it and writes nothing. The warps a tile (TileWarps) and the
// column split (TileGrid) change which warp takes a run's columns, never the order of its adds: the bits do not
// depend on them.
//
// Warps a tile: 16 up to kFewIds ids, else 4, and for few ids the columns split among the grid's y too (a block a
// tile and 32 * kColumns columns). On an H100 (reports/h100/shapes/README.md#lease14) 16 warps took a third off the
// patch at BERT's word embedding (4,096 ids: 128 tiles, 512 warps with 4 for 132 multiprocessors) and were slower at
// 65,536 ids (0.41 -> 0.53 ms), where 4 warps a tile already fill the device; the warps share a tile's heads, at
// most 32, so more warps alone leave most idle where the runs are long: the columns' split does not.
constexpr int64_t kFewIds = 16384;
int TileWarps(int64_t n) { return n <= kFewIds ? 16 : 4; }

// Two 16-warp blocks a multiprocessor, not one: the compiler gave AddRuns 71 registers a thread, so one 512-thread
// block filled a multiprocessor's registers, and an 8k embedding's 512 blocks ran in four waves of one block each
// (34 us of device time an op on an H100, 5x its bytes' floor: reports/h100/shapes/lease16/profile). At 64 registers
// float accumulators spill nothing (nvcc -Xptxas -v); double ones would, so they keep one block.
template <typename A>
constexpr int kAddRunsBlocks = sizeof(A) == 4 ? 2 : 1;

template <typename T, typename A>
__global__ void __launch_bounds__(512, kAddRunsBlocks<A>)
    AddRuns(const T* rows, const int32_t* perm, const A* part, const int32_t* sorted, int64_t n, int64_t d,
            int64_t table_rows, bool subtract, T* table) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int64_t first = blockIdx.x * int64_t{32}; first < n; first += int64_t{gridDim.x} * 32) {
    const int64_t i = first + lane;
    const int32_t key = i < n ? sorted[i] : 0;
    int32_t before = __shfl_up_sync(kAll, key, 1);
    if (lane == 0 && i > 0) before = sorted[i - 1];
    const bool head = i < n && (i == 0 || key != before);
    const unsigned heads = __ballot_sync(kAll, head);
    unsigned todo = __ballot_sync(kAll, head && key < table_rows);
    for (int rank = 0; todo != 0; todo &= todo - 1, ++rank) {
      if (rank % warps != warp) continue;
      const int b = __ffs(todo) - 1;
      const unsigned later = heads & ~((2u << b) - 1);  // b == 31: 2u << 31 wraps to 0, and no head is later
      const int64_t begin = first + b;
      const int64_t end = later != 0 ? first + __ffs(later) - 1 : RunEndFrom(sorted, min(first + 32, n) - 1, n);
      const int64_t row = __shfl_sync(kAll, key, b) * d;
      for (int64_t c0 = lane + blockIdx.y * int64_t{32 * kColumns}; c0 < d; c0 += gridDim.y * int64_t{32 * kColumns}) {
        A acc[kColumns], old[kColumns];
        RunSums<T, A>(rows, perm, part, begin, end, d, c0, acc);
#pragma unroll
        for (int k = 0; k < kColumns; ++k) old[k] = c0 + k * 32 < d ? ToAcc(table[row + c0 + k * 32]) : A(0);
#pragma unroll
        for (int k = 0; k < kColumns; ++k) {
          if (c0 + k * 32 >= d) continue;
          const A sum = ToAcc(FromAcc<T, A>(acc[k]));
          table[row + c0 + k * 32] = FromAcc<T, A>(subtract ? old[k] - sum : old[k] + sum);
        }
      }
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

// The ordering's scratch (the caller may keep it between calls: see SortGraph) and the sums' (per call).
struct Scratch {
  int32_t *keys, *sorted, *perm_in, *perm;
  int32_t *runs, *starts;  // the combine's numbering of the runs
  void* cub;
  size_t cub_bytes;
  void* part;  // the segment sums
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

constexpr int kOrderBuffers = 6;  // keys, sorted keys, two permutations, runs, starts

// `order_bytes`: what OrderScratchBytes gave, whose rest after the six buffers is CUB's (its size queries are not
// repeated on every call: each asks the driver about the device; CUB itself refuses too little).
Scratch Carve(void* order, size_t order_bytes, void* part, int64_t n) {
  char* at = static_cast<char*>(order);
  auto take = [&]() { void* p = at; at += Aligned(n * sizeof(int32_t)); return static_cast<int32_t*>(p); };
  Scratch s;
  s.keys = take();
  s.sorted = take();
  s.perm_in = take();
  s.perm = take();
  s.runs = take();
  s.starts = take();
  s.cub_bytes = order_bytes - kOrderBuffers * Aligned(n * sizeof(int32_t));
  s.cub = at;
  s.part = part;
  return s;
}

// The threads of a block: x across the columns (their count rounded up to a power of two, at most 128), y rows.
dim3 Block(int64_t d) {
  int x = 1;
  while (x < d && x < 128) x *= 2;
  return dim3(x, kThreads / x);
}

unsigned Grid(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

// CUB's sort of (key, position), and for the combine the scan that numbers the runs: stream work over the ordering's
// scratch only, so a graph of it replays on the next call over the same scratch.
cudaError_t SortAndNumber(const Scratch& s, int64_t n, int bits, bool numbered, cudaStream_t stream) {
  size_t cub_bytes = s.cub_bytes;
  // Keys in [0, 2^bits): their two's-complement low bits order them (CUB flips only the sign bit of an int).
  cudaError_t err = cub::DeviceRadixSort::SortPairs(s.cub, cub_bytes, s.keys, s.sorted, s.perm_in, s.perm,
                                                    static_cast<int>(n), 0, bits, stream);
  if (err != cudaSuccess || !numbered) return err;
  cub_bytes = s.cub_bytes;
  return cub::DeviceScan::InclusiveSum(s.cub, cub_bytes, HeadFlags(s.sorted), s.runs, static_cast<int>(n), stream);
}

}  // namespace

struct SortGraph {
  int64_t n = -1;
  int bits = -1;
  bool numbered = false;
  const void* order = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool failed = false;  // capture or replay failed once on this device: the direct path from then on

  void Forget() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    exec = nullptr;
  }
};

SortGraph* NewSortGraph() { return new SortGraph(); }

void FreeSortGraph(SortGraph* graph) {
  if (graph == nullptr) return;
  graph->Forget();
  delete graph;
}

namespace {

// The sort's work recorded as a graph to replay on `stream`, on a stream of this thread's own (no other thread's
// CUDA calls are disturbed) of the same device. False: nothing was enqueued, and the graph is not to be used.
bool Captured(const Scratch& s, int64_t n, int bits, bool numbered, cudaStream_t stream, cudaGraphExec_t* exec) {
  int device = -1, stream_device = -2;
  if (cudaGetDevice(&device) != cudaSuccess || cudaStreamGetDevice(stream, &stream_device) != cudaSuccess ||
      device != stream_device)
    return false;
  cudaStream_t capture;
  if (cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking) != cudaSuccess) return false;
  cudaError_t err = cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal);
  if (err == cudaSuccess) {
    const cudaError_t work = SortAndNumber(s, n, bits, numbered, capture);
    cudaGraph_t graph = nullptr;
    err = cudaStreamEndCapture(capture, &graph);
    if (err == cudaSuccess) err = work;
    if (err == cudaSuccess) err = cudaGraphInstantiate(exec, graph, 0);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(capture);
  return err == cudaSuccess;
}

// SortAndNumber on `stream`: replayed from `graph` from the second call in a row over the same scratch and sizes
// (a step calls with the same sizes each time; a one-off size is not worth a capture), directly otherwise.
cudaError_t Order(const Scratch& s, int64_t n, int bits, bool numbered, SortGraph* graph, cudaStream_t stream) {
  if (graph == nullptr || graph->failed) return SortAndNumber(s, n, bits, numbered, stream);
  if (graph->n != n || graph->bits != bits || graph->numbered != numbered || graph->order != s.keys) {
    graph->Forget();
    graph->n = n, graph->bits = bits, graph->numbered = numbered, graph->order = s.keys;
    return SortAndNumber(s, n, bits, numbered, stream);
  }
  if (graph->exec == nullptr && !Captured(s, n, bits, numbered, stream, &graph->exec)) {
    cudaGetLastError();  // a capture's error is not the call's: the direct path, from now on
    graph->Forget();
    graph->failed = true;
    return SortAndNumber(s, n, bits, numbered, stream);
  }
  return cudaGraphLaunch(graph->exec, stream);
}

// The keys and their positions, sorted (and for the combine, the runs numbered and marked). `limit` >= 0: keys
// outside [0, limit) become `limit` (and sort last).
template <typename K>
cudaError_t Sort(const Scratch& s, const K* keys, int64_t n, int64_t limit, SortGraph* graph, cudaStream_t stream) {
  if (n <= kBlockSortKeys) {
    BlockSort<K><<<1, kSortThreads, 0, stream>>>(keys, n, limit, KeyBits(limit), s.sorted, s.perm);
    return cudaGetLastError();
  }
  Start<K><<<Grid(n), kThreads, 0, stream>>>(keys, n, limit, s.keys, s.perm_in);
  return Order(s, n, KeyBits(limit), false, graph, stream);
}

cudaError_t SortAndMark(const Scratch& s, const int32_t* keys, int64_t n, int32_t pad, int32_t* distinct,
                        SortGraph* graph, cudaStream_t stream) {
  Start<int32_t><<<Grid(n), kThreads, 0, stream>>>(keys, n, -1, s.keys, s.perm_in);
  const cudaError_t err = Order(s, n, KeyBits(-1), true, graph, stream);
  if (err != cudaSuccess) return err;
  Mark<<<Grid(n), kThreads, 0, stream>>>(s.sorted, s.runs, n, pad, distinct, s.starts);
  return cudaGetLastError();
}

// Blocks for thread rows that stride over chunks, runs or tiles: enough to fill the GPU (a few blocks per
// multiprocessor), not one row per item, since most rows would only start and return.
constexpr int64_t kMaxRowBlocks = 2048;

unsigned RowGrid(int64_t items, int64_t per_block, int64_t most = kMaxRowBlocks) {
  return static_cast<unsigned>(std::min<int64_t>((items + per_block - 1) / per_block, most));
}

// AddRuns' blocks, a tile of 32 sorted positions each: at most sixteen 128-thread blocks for each of an H200's 132
// multiprocessors (65,536 keys make 2048 tiles, a block each).
constexpr int64_t kTileBlocks = 2112;

// AddRuns' grid: the tiles on x; for few ids, the columns on y (see TileWarps).
dim3 TileGrid(int64_t n, int64_t d) {
  const int64_t chunks = n <= kFewIds ? (d + 32 * kColumns - 1) / (32 * kColumns) : 1;
  return dim3(RowGrid(n, 32, kTileBlocks), static_cast<unsigned>(std::min<int64_t>(chunks, 65535)));
}

// The last two stages: the segment sums, then each run's sum stored into `sums` (after Number) or, when `table` is
// given, added into the table.
template <typename T>
int SumAll(const Scratch& s, const void* rows, int64_t n, int64_t d, void* sums, int64_t table_rows, bool subtract,
           void* table, cudaStream_t stream) {
  using A = typename AccOf<T>::type;
  const dim3 block = Block(d);
  A* part = static_cast<A*>(s.part);
  const T* in = static_cast<const T*>(rows);
  SumSegments<T, A><<<RowGrid((n + kCombineChunk - 1) / kCombineChunk, block.y), block, 0, stream>>>(
      in, s.perm, s.sorted, n, d, part);
  if (table == nullptr)
    SumRuns<T, A><<<RowGrid(n, block.y), block, 0, stream>>>(in, s.perm, part, s.runs, s.starts, n, d,
                                                            static_cast<T*>(sums));
  else
    AddRuns<T, A><<<TileGrid(n, d), 32 * TileWarps(n), 0, stream>>>(in, s.perm, part, s.sorted, n, d, table_rows,
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

size_t OrderScratchBytes(int64_t n) { return kOrderBuffers * Aligned(n * sizeof(int32_t)) + Aligned(CubBytes(n)); }

size_t PartScratchBytes(int64_t n, int64_t d, int type) { return Aligned(n * d * AccSize(type)); }

int LaunchCombine(int type, const int32_t* keys, const void* rows, int64_t n, int64_t d, int32_t pad,
                  int32_t* distinct, void* sums, void* order, size_t order_bytes, void* part, SortGraph* graph,
                  void* raw_stream) {
  if (order_bytes <= kOrderBuffers * Aligned(n * sizeof(int32_t))) return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t stream = static_cast<cudaStream_t>(raw_stream);
  const Scratch s = Carve(order, order_bytes, part, n);
  const cudaError_t err = SortAndMark(s, keys, n, pad, distinct, graph, stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  return SumTyped(type, s, rows, n, d, sums, 0, false, nullptr, stream);
}

int LaunchScatterCombine(int type, bool subtract, const void* keys, bool keys64, const void* rows, int64_t n,
                         int64_t d, int64_t table_rows, void* table, void* order, size_t order_bytes, void* part,
                         SortGraph* graph, void* raw_stream) {
  if (order_bytes <= kOrderBuffers * Aligned(n * sizeof(int32_t))) return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t stream = static_cast<cudaStream_t>(raw_stream);
  const Scratch s = Carve(order, order_bytes, part, n);
  const cudaError_t err =
      keys64 ? Sort(s, static_cast<const int64_t*>(keys), n, table_rows, graph, stream)
             : Sort(s, static_cast<const int32_t*>(keys), n, table_rows, graph, stream);
  if (err != cudaSuccess) return static_cast<int>(err);
  return SumTyped(type, s, rows, n, d, nullptr, table_rows, subtract, table, stream);
}

int LaunchCopy(void* to, const void* from, size_t bytes, void* stream) {
  return static_cast<int>(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice,
                                          static_cast<cudaStream_t>(stream)));
}

int LaunchZero(void* to, size_t bytes, void* stream) {
  return static_cast<int>(cudaMemsetAsync(to, 0, bytes, static_cast<cudaStream_t>(stream)));
}

}  // namespace opbisect
