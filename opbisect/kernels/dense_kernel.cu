// The GPU kernels of `OpbisectSoftmaxXent` (one block a row), `OpbisectColumnSum` and `OpbisectChannelSum`
// (dense.h): every sum in one fixed order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "dense.h"

namespace opbisect {
namespace {

__device__ __forceinline__ float Wide(float x) { return x; }
__device__ __forceinline__ float Wide(__half x) { return __half2float(x); }
__device__ __forceinline__ float Wide(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T Narrow(float x);
template <> __device__ __forceinline__ float Narrow<float>(float x) { return x; }
template <> __device__ __forceinline__ __half Narrow<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 Narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T, typename L>
__global__ void SoftmaxXent(const T* features, const L* labels, int64_t c, T* loss, T* backprop) {
  extern __shared__ float shared[];  // [threads] maxima, then [threads] sums
  const int threads = blockDim.x, t = threadIdx.x;
  const int64_t row = blockIdx.x;
  const T* x = features + row * c;
  float m = -INFINITY, s = 0.0f;
  for (int64_t j = t; j < c; j += threads) XentFold(Wide(x[j]), &m, &s);
  float* ms = shared;
  float* ss = shared + threads;
  ms[t] = m;
  ss[t] = s;
  __syncthreads();
  for (int stride = threads / 2; stride > 0; stride /= 2) {
    if (t < stride) {
      float a = ms[t], b = ss[t];
      XentMerge(ms[t + stride], ss[t + stride], &a, &b);
      ms[t] = a;
      ss[t] = b;
    }
    __syncthreads();
  }
  const float top = ms[0], sum = ss[0];
  const int64_t label = static_cast<int64_t>(labels[row]);
  const bool valid = label >= 0 && label < c;
  T* out = backprop + row * c;
  for (int64_t j = t; j < c; j += threads) {
    const float p = expf(Wide(x[j]) - top) / sum;
    out[j] = Narrow<T>(valid ? p - (j == label ? 1.0f : 0.0f) : NAN);
  }
  if (t == 0) loss[row] = Narrow<T>(valid ? logf(sum) - (Wide(x[label]) - top) : NAN);
}

template <typename T, typename L>
cudaError_t Launch(const void* features, const void* labels, int64_t n, int64_t c, void* loss, void* backprop,
                   cudaStream_t stream) {
  const int threads = XentThreads(c);
  SoftmaxXent<T, L><<<static_cast<unsigned>(n), threads, 2 * threads * sizeof(float), stream>>>(
      static_cast<const T*>(features), static_cast<const L*>(labels), c, static_cast<T*>(loss),
      static_cast<T*>(backprop));
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchTyped(const void* features, const void* labels, bool labels64, int64_t n, int64_t c, void* loss,
                        void* backprop, cudaStream_t stream) {
  return labels64 ? Launch<T, int64_t>(features, labels, n, c, loss, backprop, stream)
                  : Launch<T, int32_t>(features, labels, n, c, loss, backprop, stream);
}

// A block: kColumnThreads columns of one chunk of rows; each thread adds its column's rows of the chunk in order.
constexpr int kColumnThreads = 256;

template <typename T>
__global__ void SumChunks(const T* x, int64_t rows, int64_t cols, int64_t chunk, float* part) {
  const int64_t col = blockIdx.y * int64_t{kColumnThreads} + threadIdx.x;
  if (col >= cols) return;
  const int64_t first = blockIdx.x * chunk;
  const int64_t last = first + chunk < rows ? first + chunk : rows;
  float sum = 0.0f;
  for (int64_t r = first; r < last; ++r) sum += Wide(x[r * cols + col]);
  part[blockIdx.x * cols + col] = sum;
}

template <typename T>
__global__ void SumParts(const float* part, int64_t chunks, int64_t cols, T* out) {
  const int64_t col = blockIdx.x * int64_t{kColumnThreads} + threadIdx.x;
  if (col >= cols) return;
  float sum = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) sum += part[k * cols + col];
  out[col] = Narrow<T>(sum);
}

template <typename T>
cudaError_t ColumnSum(const void* x, int64_t rows, int64_t cols, void* out, float* part, cudaStream_t stream) {
  const int64_t chunks = ColumnChunks(rows);
  const unsigned tiles = static_cast<unsigned>((cols + kColumnThreads - 1) / kColumnThreads);
  // Chunks on the grid's x (up to 2^31 - 1), column tiles on its y (up to 65535: 16M columns). No rows: no
  // chunks, and the sums are zeros.
  if (chunks > 0)
    SumChunks<T><<<dim3(static_cast<unsigned>(chunks), tiles), kColumnThreads, 0, stream>>>(
        static_cast<const T*>(x), rows, cols, ColumnChunk(rows), part);
  SumParts<T><<<tiles, kColumnThreads, 0, stream>>>(part, chunks, cols, static_cast<T*>(out));
  return cudaGetLastError();
}

// One block a row of x[rows, s]: each thread's entries in order, then the block's fixed tree (dense.h).
template <typename T>
__global__ void SumPositions(const T* x, int64_t s, float* part) {
  extern __shared__ float lanes[];
  const int threads = blockDim.x, t = threadIdx.x;
  const T* row = x + static_cast<int64_t>(blockIdx.x) * s;
  // Four loads in flight, then added in the entries' order (the same bits as one at a time): on an H100 the one
  // chain a thread read a ResNet's NCHW gradient at 1.9 TB/s against a copy's 2.9 (reports/h100/shapes#lease14).
  float sum = 0.0f;
  int64_t j = t;
  for (; j + 3 * threads < s; j += 4 * threads) {
    const float a = Wide(row[j]), b = Wide(row[j + threads]), c = Wide(row[j + 2 * threads]);
    const float e = Wide(row[j + 3 * threads]);
    sum += a;
    sum += b;
    sum += c;
    sum += e;
  }
  for (; j < s; j += threads) sum += Wide(row[j]);
  lanes[t] = sum;
  __syncthreads();
  for (int stride = threads / 2; stride > 0; stride /= 2) {
    if (t < stride) lanes[t] += lanes[t + stride];
    __syncthreads();
  }
  if (t == 0) part[blockIdx.x] = lanes[0];
}

template <typename T>
cudaError_t ChannelSum(const void* x, int64_t n, int64_t c, int64_t s, void* out, float* part, cudaStream_t stream) {
  const int threads = ChannelThreads(s);
  if (n * c > 0)  // rows on the grid's x (up to 2^31 - 1)
    SumPositions<T><<<static_cast<unsigned>(n * c), threads, threads * sizeof(float), stream>>>(
        static_cast<const T*>(x), s, part);
  const unsigned tiles = static_cast<unsigned>((c + kColumnThreads - 1) / kColumnThreads);
  SumParts<T><<<tiles, kColumnThreads, 0, stream>>>(part, n, c, static_cast<T*>(out));
  return cudaGetLastError();
}

__global__ void ResizeTableKernel(ResizeAxis ay, ResizeAxis ax, int64_t entries, int32_t* words) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < entries; e += int64_t{gridDim.x} * blockDim.x)
    ResizeTableEntry(ay, ax, e, words);
}

// I: the element index's type, 32 bits where the elements fit (64-bit division is a loop of many instructions).
template <typename T, typename I>
__global__ void ResizeGrad(const float* grads, I total, ResizeAxis ay, ResizeAxis ax, I c, const int32_t* words,
                           T* out) {
  ResizeTables ty, tx;
  ResizeTablesIn(ay, ax, words, &ty, &tx);
  const I width = static_cast<I>(ax.in), height = static_cast<I>(ay.in);
  for (I e = blockIdx.x * I{blockDim.x} + threadIdx.x; e < total; e += I{gridDim.x} * blockDim.x) {
    const I pixel = e / c, row = pixel / width, image = row / height;
    const I k = e - pixel * c, j = pixel - row * width, i = row - image * height;
    out[e] = static_cast<T>(ResizeGradAt(grads + int64_t{image} * ay.out * ax.out * c, ty, tx, ax.out, c, i, j, k));
  }
}

unsigned Blocks(int64_t elements) {  // 256 threads a block, the grid's x at most 65535 * 16 (a strided loop past it)
  const int64_t wanted = (elements + 255) / 256;
  return static_cast<unsigned>(wanted < 65535 * 16 ? wanted : 65535 * 16);
}

template <typename T>
cudaError_t ResizeGradTyped(const float* grads, int64_t n, const ResizeAxis& ay, const ResizeAxis& ax, int64_t c,
                            int32_t* words, void* out, cudaStream_t stream) {
  const int64_t total = n * ay.in * ax.in * c, entries = ResizeTableEntries(ay, ax);
  if (total == 0) return cudaSuccess;
  ResizeTableKernel<<<Blocks(entries), 256, 0, stream>>>(ay, ax, entries, words);
  const unsigned blocks = Blocks(total);
  if (total + int64_t{blocks} * 256 < (int64_t{1} << 32))  // the last stride's index fits too
    ResizeGrad<T, uint32_t><<<blocks, 256, 0, stream>>>(grads, static_cast<uint32_t>(total), ay, ax,
                                                        static_cast<uint32_t>(c), words, static_cast<T*>(out));
  else
    ResizeGrad<T, int64_t><<<blocks, 256, 0, stream>>>(grads, total, ay, ax, c, words, static_cast<T*>(out));
  return cudaGetLastError();
}

}  // namespace

int LaunchResizeGrad(int type, const float* grads, int64_t n, const ResizeAxis& ay, const ResizeAxis& ax, int64_t c,
                     int32_t* tables, void* out, void* raw_stream) {
  cudaStream_t stream = static_cast<cudaStream_t>(raw_stream);
  switch (type) {
    case kDenseF32: return ResizeGradTyped<float>(grads, n, ay, ax, c, tables, out, stream);
    case kDenseF64: return ResizeGradTyped<double>(grads, n, ay, ax, c, tables, out, stream);
    case kDenseF16: return ResizeGradTyped<__half>(grads, n, ay, ax, c, tables, out, stream);
    default: return ResizeGradTyped<__nv_bfloat16>(grads, n, ay, ax, c, tables, out, stream);
  }
}

int LaunchChannelSum(int type, const void* x, int64_t n, int64_t c, int64_t s, void* out, float* part,
                     void* raw_stream) {
  cudaStream_t stream = static_cast<cudaStream_t>(raw_stream);
  switch (type) {
    case kDenseF32: return ChannelSum<float>(x, n, c, s, out, part, stream);
    case kDenseF16: return ChannelSum<__half>(x, n, c, s, out, part, stream);
    default: return ChannelSum<__nv_bfloat16>(x, n, c, s, out, part, stream);
  }
}

int LaunchColumnSum(int type, const void* x, int64_t rows, int64_t cols, void* out, float* part, void* raw_stream) {
  cudaStream_t stream = static_cast<cudaStream_t>(raw_stream);
  switch (type) {
    case kDenseF32: return ColumnSum<float>(x, rows, cols, out, part, stream);
    case kDenseF16: return ColumnSum<__half>(x, rows, cols, out, part, stream);
    default: return ColumnSum<__nv_bfloat16>(x, rows, cols, out, part, stream);
  }
}

int LaunchSoftmaxXent(int type, const void* features, const void* labels, bool labels64, int64_t n, int64_t c,
                      void* loss, void* backprop, void* raw_stream) {
  cudaStream_t stream = static_cast<cudaStream_t>(raw_stream);
  switch (type) {
    case kDenseF32: return LaunchTyped<float>(features, labels, labels64, n, c, loss, backprop, stream);
    case kDenseF16: return LaunchTyped<__half>(features, labels, labels64, n, c, loss, backprop, stream);
    default: return LaunchTyped<__nv_bfloat16>(features, labels, labels64, n, c, loss, backprop, stream);
  }
}

}  // namespace opbisect
