// opbisect's dense ops: sums that TensorFlow's GPU kernels add in thread or atomic order, in one fixed order.
//
// The deterministic sparse softmax cross-entropy (`OpbisectSoftmaxXent`): features[n, c], labels[n] ->
//   loss[i]        = log(sum_j exp(x[i,j] - m[i])) - (x[i, labels[i]] - m[i]),   m[i] = max_j x[i,j]
//   backprop[i, j] = exp(x[i,j] - m[i]) / sum_j exp(x[i,j] - m[i]) - (j == labels[i])
// what SparseSoftmaxCrossEntropyWithLogits computes (in float for the half types), with every sum in one fixed
// order: each row is one GPU block of XentThreads(c) threads; thread t folds x[i, t], x[i, t + threads], ... into
// a running (max, sum of exp) in that order, then the threads' pairs are merged by one fixed tree (t with
// t + stride, stride halving). No atomics: the same row gives the same bits on every run. Three passes over the
// row where the op's own kernel takes four (one read for max and sum together, one read and one write for the
// gradient). A label outside [0, c) gives a row of NaN, as the GPU kernel gives (its CPU kernel raises).
#pragma once
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define OPBISECT_HOST_DEVICE __host__ __device__
#else
#define OPBISECT_HOST_DEVICE
#endif

namespace opbisect {

// (max, sum of exp(x - max)) with x folded in: one thread's step, on the GPU and in the CPU kernel alike. An entry
// of -inf adds nothing (and would make exp(-inf - -inf)).
OPBISECT_HOST_DEVICE inline void XentFold(float x, float* m, float* s) {
  if (x > *m) {
    *s = *s * expf(*m - x) + 1.0f;
    *m = x;
  } else if (x != -INFINITY) {
    *s += expf(x - *m);
  }
}

// (m, s) merged with (m2, s2): one step of the block's tree; an empty side (s == 0) adds nothing.
OPBISECT_HOST_DEVICE inline void XentMerge(float m2, float s2, float* m, float* s) {
  if (s2 == 0.0f) return;
  if (*s == 0.0f) {
    *m = m2;
    *s = s2;
    return;
  }
  const float top = fmaxf(*m, m2);
  *s = *s * expf(*m - top) + s2 * expf(m2 - top);
  *m = top;
}

// Threads per row: a power of two from 32 to 1024, about c / 16, so that each thread folds at least ~16 entries
// and a 128k-entry row still fills one block. A function of c alone: the order depends on nothing else.
inline int XentThreads(int64_t c) {
  int threads = 32;
  while (threads < 1024 && int64_t{threads} * 16 < c) threads *= 2;
  return threads;
}

enum DenseType : int { kDenseF32 = 0, kDenseF16 = 1, kDenseBF16 = 2, kDenseF64 = 3 };

// Enqueues the op on `stream` (a cudaStream_t); n >= 1, c >= 1. Returns a CUDA error code (0: none).
int LaunchSoftmaxXent(int type, const void* features, const void* labels, bool labels64, int64_t n, int64_t c,
                      void* loss, void* backprop, void* stream);

// The deterministic column sum (`OpbisectColumnSum`): x[rows, cols] -> out[c] = sum_r x[r, c], what BiasAddGrad
// computes for a channels-last gradient seen as [rows, channels]. The rows are cut into chunks of ColumnChunk(rows)
// rows; each chunk's rows of one column are added in order (one GPU thread, consecutive threads on consecutive
// columns, so each row is read coalesced), from zero, in float for the half types; then each column's chunk sums
// are added in order. One read of x, a scratch of at most kColumnChunksMax floats per column, no atomics. The chunk
// grows with the rows (at least 64 rows, at most 256 chunks), so the second pass, one thread a column, adds at most
// 256 sums: a ResNet's [100352, 64] gradient would otherwise leave one block adding 1568 of them.
constexpr int64_t kColumnChunkMin = 64;
constexpr int64_t kColumnChunksMax = 256;

// Rows per chunk: a function of the row count alone, so the order of the adds depends on nothing else.
inline int64_t ColumnChunk(int64_t rows) {
  const int64_t even = (rows + kColumnChunksMax - 1) / kColumnChunksMax;
  return even > kColumnChunkMin ? even : kColumnChunkMin;
}

inline int64_t ColumnChunks(int64_t rows) { return (rows + ColumnChunk(rows) - 1) / ColumnChunk(rows); }

// Enqueues the op on `stream`; rows >= 1, cols >= 1; `part` holds ColumnChunks(rows) * cols floats.
int LaunchColumnSum(int type, const void* x, int64_t rows, int64_t cols, void* out, float* part, void* stream);

// The deterministic channel sum (`OpbisectChannelSum`): x[n, c, s] -> out[k] = sum_i sum_j x[i, k, j], what
// BiasAddGrad computes for a channels-first gradient seen as [batch, channels, positions]. Each (i, k)'s s entries
// are one GPU block of ChannelThreads(s) threads: thread t adds entries t, t + threads, ... in order, from zero, in
// float; the threads' sums are merged by one fixed tree (t with t + stride, stride halving) into a scratch of n * c
// floats; then each channel's n sums are added in order, from zero (the column sum's second pass). One read of x, no
// atomics. TensorFlow's reduce_sum over N, H and W read a ResNet's NCHW gradient at 1.36-1.55x the op's own kernel
// on the H100 (reports/h100/shapes), and a row reduction in half precision would round each (i, k)'s sum to half.
inline int ChannelThreads(int64_t s) {  // a function of s alone: the order depends on nothing else
  int threads = 32;
  while (threads < 256 && int64_t{threads} * 8 < s) threads *= 2;
  return threads;
}

// Enqueues the op on `stream`; `part` holds n * c floats.
int LaunchChannelSum(int type, const void* x, int64_t n, int64_t c, int64_t s, void* out, float* part, void* stream);

// The deterministic bilinear resize gradient (`OpbisectResizeBilinearGrad`): grads[n, oh, ow, c] (float) ->
// out[n, ih, iw, c] = the sum, over the output pixels (y, x) whose interpolation reads input pixel (i, j), of
// grads[n, y, x, c] * wy(y, i) * wx(x, j), with each axis' taps and weights as TensorFlow's resize computes them
// (ResizeTaps). TensorFlow's GPU kernel scatters each output pixel's four terms with atomics; this gathers: one GPU
// thread an output element, its rows y and then its columns x in increasing order, each product rounded as
// written (no fused multiply-add, so that the CPU kernel gives the same bits). On an H100 the former patch, two
// float64 matmuls with the interpolation matrices, took 2.7-3.3x the op (reports/h100/shapes/README.md#lease14).
// Each axis' taps and spans are computed once into tables (ResizeTables) that the gather reads: computed in the
// gather, a pixel's 64 channels computed them 64 times (on an H100 at 64 channels 2.14x the op, 8.5x its bytes'
// floor; 1.28x with the tables, 5.2x the floor: reports/h100/shapes/README.md#lease16).
struct ResizeAxis {
  int64_t in, out;  // the original image's size on this axis, the resized one's
  float scale;      // as TensorFlow's CalculateResizeScale
  bool half_pixel;
};

OPBISECT_HOST_DEVICE inline float ResizeMul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

OPBISECT_HOST_DEVICE inline float ResizeAdd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

inline ResizeAxis MakeResizeAxis(int64_t in, int64_t out, bool align_corners, bool half_pixel) {
  const float scale = (align_corners && out > 1) ? (in - 1) / static_cast<float>(out - 1)
                                                 : in / static_cast<float>(out);
  return ResizeAxis{in, out, scale, half_pixel};
}

// Output position o's two taps on the input axis and the upper one's weight, as TensorFlow's resize computes them.
OPBISECT_HOST_DEVICE inline void ResizeTaps(const ResizeAxis& a, int64_t o, int64_t* low, int64_t* high,
                                            float* lerp) {
  const float where = a.half_pixel ? ResizeAdd(ResizeMul(ResizeAdd(static_cast<float>(o), 0.5f), a.scale), -0.5f)
                                   : ResizeMul(static_cast<float>(o), a.scale);
  const float down = floorf(where);
  const int64_t below = static_cast<int64_t>(down), above = static_cast<int64_t>(ceilf(where));
  *low = below > 0 ? below : 0;
  *high = above < a.in - 1 ? above : a.in - 1;
  *lerp = ResizeAdd(where, -down);
}

// Output position o's taps as ResizeTaps gives them (sizes fit 32 bits: TensorFlow's image sizes are int32).
struct ResizeTap {
  int32_t low, high;
  float lerp;
};

OPBISECT_HOST_DEVICE inline ResizeTap ResizeTapAt(const ResizeAxis& a, int64_t o) {
  int64_t low, high;
  float lerp;
  ResizeTaps(a, o, &low, &high, &lerp);
  return ResizeTap{static_cast<int32_t>(low), static_cast<int32_t>(high), lerp};
}

// Input position i's weight in the output position of tap t (zero where it does not read i; both taps' where both
// are i).
OPBISECT_HOST_DEVICE inline float ResizeTapWeight(const ResizeTap& t, int64_t i) {
  return ResizeAdd(t.low == i ? ResizeAdd(1.0f, -t.lerp) : 0.0f, t.high == i ? t.lerp : 0.0f);
}

// The first output position o in [0, out] where `reaches(o)` holds; `reaches` never turns false as o grows (the taps
// never decrease with o). From an estimate, stepped to the exact bound: where the estimate is off by a rounding the
// steps are one or two, against a binary search's log2(out) taps for every element (an H100: the search made the
// gather kernel compute-bound, 2.7x the op at 64 channels).
template <typename Reaches>
OPBISECT_HOST_DEVICE inline int64_t ResizeFirst(const ResizeAxis& a, float estimate, Reaches reaches) {
  int64_t o = estimate > 0.0f ? (estimate < static_cast<float>(a.out) ? static_cast<int64_t>(estimate) : a.out) : 0;
  while (o > 0 && reaches(o - 1)) --o;
  while (o < a.out && !reaches(o)) ++o;
  return o;
}

// The output position whose sampling point is at input coordinate `at`, as a float estimate (inverting ResizeTaps).
OPBISECT_HOST_DEVICE inline float ResizeInverse(const ResizeAxis& a, float at) {
  if (!(a.scale > 0.0f)) return 0.0f;  // a one-pixel axis with corners aligned: every output reads pixel 0
  return a.half_pixel ? (at + 0.5f) / a.scale - 0.5f : at / a.scale;
}

// The outputs that read an input position: [first, last] (empty: first > last).
struct ResizeSpan {
  int32_t first, last;
};

// The first is the first whose upper tap reaches i (its point above i - 1), the last the one before the first whose
// lower tap passes i (point >= i + 1).
OPBISECT_HOST_DEVICE inline ResizeSpan ResizeSpanAt(const ResizeAxis& a, int64_t i) {
  const int64_t first = ResizeFirst(a, ResizeInverse(a, static_cast<float>(i - 1)),
                                    [&](int64_t o) { return ResizeTapAt(a, o).high >= i; });
  const int64_t after = ResizeFirst(a, ResizeInverse(a, static_cast<float>(i + 1)),
                                    [&](int64_t o) { return ResizeTapAt(a, o).low > i; });
  return ResizeSpan{static_cast<int32_t>(first), static_cast<int32_t>(after - 1)};
}

// One axis' tables: a tap an output position, a span an input position.
struct ResizeTables {
  const ResizeTap* taps;
  const ResizeSpan* spans;
};

// Both axes' tables in one buffer of 32-bit words: the y taps, the x taps, the y spans, the x spans.
inline int64_t ResizeTableWords(const ResizeAxis& ay, const ResizeAxis& ax) {
  return 3 * (ay.out + ax.out) + 2 * (ay.in + ax.in);
}

// Their entries, a tap or a span each (ResizeTableEntry's e ranges over them).
inline int64_t ResizeTableEntries(const ResizeAxis& ay, const ResizeAxis& ax) {
  return ay.out + ax.out + ay.in + ax.in;
}

OPBISECT_HOST_DEVICE inline void ResizeTablesIn(const ResizeAxis& ay, const ResizeAxis& ax, const int32_t* words,
                                                ResizeTables* ty, ResizeTables* tx) {
  ty->taps = reinterpret_cast<const ResizeTap*>(words);
  tx->taps = ty->taps + ay.out;
  ty->spans = reinterpret_cast<const ResizeSpan*>(words + 3 * (ay.out + ax.out));
  tx->spans = ty->spans + ay.in;
}

// Entry e of the tables (e < ResizeTableEntries, in the buffer's order); one GPU thread an entry.
OPBISECT_HOST_DEVICE inline void ResizeTableEntry(const ResizeAxis& ay, const ResizeAxis& ax, int64_t e,
                                                  int32_t* words) {
  ResizeTap* taps = reinterpret_cast<ResizeTap*>(words);  // the y taps, then the x taps
  ResizeSpan* spans = reinterpret_cast<ResizeSpan*>(words + 3 * (ay.out + ax.out));
  if (e < ay.out + ax.out) {
    taps[e] = e < ay.out ? ResizeTapAt(ay, e) : ResizeTapAt(ax, e - ay.out);
  } else {
    e -= ay.out + ax.out;
    spans[e] = e < ay.in ? ResizeSpanAt(ay, e) : ResizeSpanAt(ax, e - ay.in);
  }
}

// One output element: its rows, then its columns, in increasing order. `grads` points at image n's [oh, ow, c].
OPBISECT_HOST_DEVICE inline float ResizeGradAt(const float* grads, const ResizeTables& ty, const ResizeTables& tx,
                                               int64_t ow, int64_t c, int64_t i, int64_t j, int64_t k) {
  const ResizeSpan sy = ty.spans[i], sx = tx.spans[j];
  float acc = 0.0f;
  for (int64_t y = sy.first; y <= sy.last; ++y) {
    const float wy = ResizeTapWeight(ty.taps[y], i);
    for (int64_t x = sx.first; x <= sx.last; ++x)
      acc = ResizeAdd(acc, ResizeMul(ResizeMul(grads[(y * ow + x) * c + k], wy), ResizeTapWeight(tx.taps[x], j)));
  }
  return acc;
}

// Enqueues the op on `stream`: out is [n, ay.in, ax.in, c] of `type` (a DenseType).
// `tables` holds ResizeTableWords(ay, ax) words, filled here first.
int LaunchResizeGrad(int type, const float* grads, int64_t n, const ResizeAxis& ay, const ResizeAxis& ax, int64_t c,
                     int32_t* tables, void* out, void* stream);

}  // namespace opbisect
