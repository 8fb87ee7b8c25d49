// The fused fingerprint's GPU kernel alone, against the device's read and copy bandwidth, and candidate forms of
// it, side by side in one run (a benchmark, not part of the op library). Each form must give the op's digests.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/fingerprint_kernel benchmarks/fingerprint_kernel.cu && /tmp/fingerprint_kernel
//
// Sets: one 2 GiB tensor, 64 tensors of 32 MB in int8, bfloat16 and int64 words (each width's full chunks), and the
// BERT-like base step's tapped outputs (4028 tensors, 6.7 GB: about 12.6 MB
// activations, 25 MB attention scores, 50 MB feed-forward, and many small ones), in launches of kBatch tensors as
// the op makes them. Prints ms and GB/s (bytes read once) per form.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../opbisect/kernels/fingerprint_kernel.cu"

namespace opbisect {

// The forms the op's kernel is measured against, in a copy of the op's frame (which tensor a block takes, the
// block's reduction):
// - Strided: the op's kernel until 2026-12-07, a strided loop over the chunk (16-byte loads where aligned);
// - LoadsFirst: the first cut of the op's present form, all of a full chunk's loads before the arithmetic in one
//   round (the op's SumFullChunk holds at most kInFlight loads at once; the same for 4-byte words).
struct Strided {
  template <typename W, int Chunk>
  static __device__ __forceinline__ uint64_t Run(const void* data, int64_t begin, int64_t end) {
    const W* p = static_cast<const W*>(data);
    if (reinterpret_cast<uintptr_t>(p) % 16 == 0) return SumVectorized(p, begin, end);
    return Sum(p, begin, end);
  }
};

// The op's SumFullChunk at another chunk, with every load of the chunk in flight at once (one round).
template <typename W, int Chunk>
__device__ __forceinline__ uint64_t SumLoadsFirst(const void* data, int64_t begin, int64_t end) {
  const W* p = static_cast<const W*>(data);
  if (end - begin != Chunk || reinterpret_cast<uintptr_t>(p) % 16 != 0) return Sum(p, begin, end);
  return SumFullChunk<W, Chunk, Chunk / (16 / sizeof(W)) / kThreads>(p, begin);
}

struct LoadsFirst {
  template <typename W, int Chunk>
  static __device__ __forceinline__ uint64_t Run(const void* data, int64_t begin, int64_t end) {
    return SumLoadsFirst<W, Chunk>(data, begin, end);
  }
};

template <typename Form, int Chunk, int MinBlocks>
__global__ void __launch_bounds__(kThreads, MinBlocks) Framed(Batch b, uint64_t* out) {
  const int64_t block = blockIdx.x;
  int lo = 0, hi = b.count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (b.first_block[mid] <= block) lo = mid; else hi = mid - 1;
  }
  const int t = lo;
  const int64_t begin = (block - b.first_block[t]) * Chunk;
  const int64_t end = min(begin + Chunk, b.words[t]);
  uint64_t acc = 0;
  switch (b.width[t]) {
    case 1: acc = Form::template Run<int8_t, Chunk>(b.ptr[t], begin, end); break;
    case 2: acc = Form::template Run<int16_t, Chunk>(b.ptr[t], begin, end); break;
    case 4: acc = Form::template Run<int32_t, Chunk>(b.ptr[t], begin, end); break;
    default: acc = Form::template Run<int64_t, Chunk>(b.ptr[t], begin, end); break;
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

// The read floor: every 16-byte word read once and folded so the loads cannot be dropped.
__global__ void ReadOnly(const uint4* p, int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 q = __ldg(p + i);
    acc ^= q.x ^ q.y ^ q.z ^ q.w;
  }
  if (acc == 0x12345678u) atomicAdd(sink, 1u);
}

}  // namespace opbisect

using namespace opbisect;

struct Tensor { const void* ptr; int64_t words; int width; };

// The op's batching for a given chunk: blocks per tensor, kBatch tensors a launch.
static std::vector<Batch> Batches(const std::vector<Tensor>& ts, int64_t chunk) {
  std::vector<Batch> out;
  Batch b;
  std::memset(&b, 0, sizeof(b));
  for (const Tensor& t : ts) {
    const int k = b.count;
    b.ptr[k] = t.ptr;
    b.words[k] = t.words;
    b.width[k] = t.width;
    b.first_block[k + 1] = b.first_block[k] + (t.words + chunk - 1) / chunk + (t.words == 0 ? 1 : 0);
    b.count = k + 1;
    if (b.count == kBatch) { out.push_back(b); std::memset(&b, 0, sizeof(b)); }
  }
  if (b.count) out.push_back(b);
  return out;
}

template <typename Launch>
static float TimeMs(Launch launch, int repeats) {
  cudaEvent_t a, z;
  cudaEventCreate(&a);
  cudaEventCreate(&z);
  launch();  // warm-up
  std::vector<float> ms;
  for (int r = 0; r < repeats; ++r) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(z);
    cudaEventSynchronize(z);
    float m = 0;
    cudaEventElapsedTime(&m, a, z);
    ms.push_back(m);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

static std::vector<Tensor> BertLike(char* base, int64_t* bytes_out) {
  // sizes in bytes and counts, about the base step's 4028 tapped outputs (float32 unless said)
  const std::vector<std::pair<int64_t, int>> mix = {
      {32LL * 128 * 768 * 4, 300},     // [B, L, D] activations and their gradients
      {32LL * 12 * 128 * 128 * 4, 40},  // attention scores and probabilities
      {32LL * 128 * 3072 * 4, 30},      // feed-forward inner
      {768LL * 768 * 4, 120},           // weights' gradients
      {768LL * 4, 900},                 // biases, norms' parameters
      {32LL * 128 * 4, 1500},           // per-token reductions
      {8, 1078}};                       // scalars
  std::vector<Tensor> ts;
  int64_t offset = 0;
  for (auto [bytes, count] : mix)
    for (int i = 0; i < count; ++i) {
      ts.push_back({base + offset, bytes / 4, 4});
      offset += (bytes + 255) / 256 * 256;
    }
  std::shuffle(ts.begin(), ts.end(), std::mt19937(0));
  *bytes_out = offset;
  return ts;
}

template <typename Kernel>
static float RunSet(Kernel kernel, const std::vector<Batch>& batches, uint64_t* out, int repeats) {
  return TimeMs([&] {
    int base = 0;
    cudaMemsetAsync(out, 0, 8 * 8192);
    for (const Batch& b : batches) {
      kernel<<<static_cast<unsigned>(b.first_block[b.count]), kThreads>>>(b, out + base);
      base += b.count;
    }
  }, repeats);
}

int main() {
  const int64_t total = 7LL << 30;
  char* buf = nullptr;
  if (cudaMalloc(&buf, total) != cudaSuccess) { std::printf("cudaMalloc failed\n"); return 1; }
  std::vector<unsigned> host(1 << 20);
  std::mt19937 rng(1);
  for (auto& h : host) h = rng();
  for (int64_t o = 0; o < total; o += host.size() * 4)
    cudaMemcpy(buf + o, host.data(), std::min<int64_t>(host.size() * 4, total - o), cudaMemcpyHostToDevice);
  uint64_t* out = nullptr;
  cudaMalloc(&out, 8 * 8192);
  unsigned* sink = nullptr;
  cudaMalloc(&sink, 4);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);

  const int64_t big = 2LL << 30;
  int64_t mix_bytes = 0;
  std::vector<Tensor> mix = BertLike(buf, &mix_bytes);
  auto same_width = [&](int width) {  // 64 tensors of 32 MB, one after another
    std::vector<Tensor> ts;
    for (int64_t i = 0; i < 64; ++i) ts.push_back({buf + i * (32LL << 20), (32LL << 20) / width, width});
    return ts;
  };
  const std::vector<std::pair<const char*, std::vector<Tensor>>> sets = {
      {"one 2 GiB tensor", {{buf, big / 4, 4}}}, {"64 x 32 MB, 1-byte words", same_width(1)},
      {"64 x 32 MB, 2-byte words", same_width(2)}, {"64 x 32 MB, 8-byte words", same_width(8)},
      {"BERT-like base mix", mix}};
  const int repeats = 20;
  for (const auto& set : sets) {
    const char* name = set.first;
    const std::vector<Tensor>& ts = set.second;
    int64_t bytes = 0;
    for (auto& t : ts) bytes += t.words * t.width;
    std::printf("%s: %zu tensors, %.0f MB\n", name, ts.size(), bytes / 1e6);
    const float read = TimeMs([&] { ReadOnly<<<prop.multiProcessorCount * 8, 512>>>(
        reinterpret_cast<const uint4*>(buf), bytes / 16, sink); }, repeats);
    const int64_t copied = std::min(bytes, total / 2);
    const float copy = TimeMs([&] { cudaMemcpyAsync(buf + (total / 2), buf, copied, cudaMemcpyDeviceToDevice); },
                              repeats);
    std::printf("  %-34s %8.3f ms %8.0f GB/s\n", "read floor (one buffer, XOR)", read, bytes / read / 1e6);
    std::printf("  %-34s %8.3f ms %8.0f GB/s (read + write, %.0f MB)\n", "cudaMemcpy device to device", copy,
                2 * copied / copy / 1e6, copied / 1e6);
    std::vector<uint64_t> want(ts.size()), got(ts.size());
    auto check = [&](const char* form, float ms) {
      cudaMemcpy(got.data(), out, 8 * ts.size(), cudaMemcpyDeviceToHost);
      std::printf("  %-34s %8.3f ms %8.0f GB/s  %s\n", form, ms, bytes / ms / 1e6,
                  got == want ? "same digests" : "DIGESTS DIFFER");
    };
    const auto batches = Batches(ts, kChunk);
    const float op = RunSet(FingerprintKernel, batches, out, repeats);
    cudaMemcpy(want.data(), out, 8 * ts.size(), cudaMemcpyDeviceToHost);
    check("the op's kernel (16384 words)", op);
    const auto batches8 = Batches(ts, 8192);
    check("strided, 8192 words (the op before)", RunSet(Framed<Strided, 8192, 4>, batches8, out, repeats));
    check("loads first, 16384 words, one round", RunSet(Framed<LoadsFirst, 16384, 2>, batches, out, repeats));
    check("loads first, 8192 words, 4 blocks", RunSet(Framed<LoadsFirst, 8192, 4>, batches8, out, repeats));
  }
  const cudaError_t err = cudaGetLastError();
  std::printf("CUDA: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 170;
}
