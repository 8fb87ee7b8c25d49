// TensorFlow op `OpbisectFingerprint`: tensors (any numeric dtypes) -> int64[N] digests, see fingerprint.h.
// A CPU kernel always; a GPU kernel when built with OPBISECT_WITH_CUDA (the .cu beside this file). With
// `side_stream`, the GPU kernel reads on a second stream (side_stream.h), and `OpbisectAwaitDigests` is where the
// step's stream waits for those reads: every side-stream digest must reach one before anything reads it.
#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "fingerprint.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"

#ifdef OPBISECT_WITH_CUDA
#include "gpu_op.h"
#include "side_stream.h"
#endif

namespace opbisect {
namespace tf = ::tensorflow;

REGISTER_OP("OpbisectFingerprint")
    .Input("tensors: T")
    .Output("digests: int64")
    .Attr("T: list(type) >= 1")
    .Attr("side_stream: bool = false")
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Vector(c->num_inputs()));
      return absl::OkStatus();
    });

// The digests of side-stream fingerprints, passed through once the step's stream has waited for the side stream.
REGISTER_OP("OpbisectAwaitDigests")
    .Input("digests: N * int64")
    .Output("ready: N * int64")
    .Attr("N: int >= 1")
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    });

static void PassThrough(tf::OpKernelContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
}

class AwaitDigestsCpu : public tf::OpKernel {  // the CPU's digests are done when their op returns
 public:
  explicit AwaitDigestsCpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override { PassThrough(c); }
};
REGISTER_KERNEL_BUILDER(Name("OpbisectAwaitDigests").Device(tf::DEVICE_CPU), AwaitDigestsCpu);

// Word width and count of a tensor: complex128 counts as two int64 words per element.
static void Words(const tf::Tensor& t, int* width, int64_t* words) {
  const int64_t bytes = static_cast<int64_t>(t.TotalBytes());
  const int size = tf::DataTypeSize(t.dtype());
  *width = size >= 8 ? 8 : size;
  *words = *width > 0 ? bytes / *width : 0;
}

// The weighted sum of words [begin, end) of one tensor, without the size term. Four lanes, each weight stepping by
// 8 * golden, keep four multiplies in flight where one lane waited on each add.
template <typename W>
static uint64_t HostSum(const void* data, int64_t begin, int64_t end) {
  const W* p = static_cast<const W*>(data);
  auto weight = [](int64_t j) { return (2ull * static_cast<uint64_t>(j) + 1ull) * kGolden; };
  uint64_t acc[4] = {0, 0, 0, 0}, w[4] = {weight(begin), weight(begin + 1), weight(begin + 2), weight(begin + 3)};
  const uint64_t step = 8ull * kGolden;
  int64_t j = begin;
  for (; j + 4 <= end; j += 4) {
    for (int k = 0; k < 4; ++k) {
      acc[k] += static_cast<uint64_t>(static_cast<int64_t>(p[j + k])) * w[k];
      w[k] += step;
    }
  }
  uint64_t total = acc[0] + acc[1] + acc[2] + acc[3];
  for (; j < end; ++j) total += static_cast<uint64_t>(static_cast<int64_t>(p[j])) * weight(j);
  return total;
}

static uint64_t HostSum(const void* data, int width, int64_t begin, int64_t end) {
  return width == 1 ? HostSum<int8_t>(data, begin, end) : width == 2 ? HostSum<int16_t>(data, begin, end)
       : width == 4 ? HostSum<int32_t>(data, begin, end) : HostSum<int64_t>(data, begin, end);
}

// Words a CPU work item reads: small enough that a step's few large tensors spread over every core (the op is one
// node per group of taps, so without pieces one thread read them all), large enough that scheduling costs nothing.
// On the 2-core CPU, 16 tensors of 16 MB: 4.8-4.9 GB/s on one thread, 6.4-7.1 in pieces; farmhash's per-tap
// kernels 9.1-10.3 (benchmarks/cpu/fingerprint_throughput_pieces.txt).
constexpr int64_t kHostPiece = 1 << 16;

struct Piece {  // words [begin, end) of input `tensor`
  const void* data;
  int width, tensor;
  int64_t begin, end;
};

// Every input's words cut into pieces; each digest starts at its input's size term.
static std::vector<Piece> Pieces(tf::OpKernelContext* c, std::vector<uint64_t>* digests) {
  std::vector<Piece> pieces;
  for (int i = 0; i < c->num_inputs(); ++i) {
    const tf::Tensor& t = c->input(i);
    int width;
    int64_t words;
    Words(t, &width, &words);
    (*digests)[i] = static_cast<uint64_t>(words) * kSizeMix;
    for (int64_t b = 0; b < words; b += kHostPiece) {
      pieces.push_back(Piece{t.tensor_data().data(), width, i, b, std::min(words, b + kHostPiece)});
    }
  }
  return pieces;
}

class FingerprintCpu : public tf::OpKernel {
 public:
  explicit FingerprintCpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, tf::TensorShape({c->num_inputs()}), &out));
    std::vector<uint64_t> digests(c->num_inputs());
    const std::vector<Piece> pieces = Pieces(c, &digests);
    // Each piece's sum lands in its own slot; adding the slots wraps and commutes, so the digests do not depend on
    // how the pool splits the pieces.
    std::vector<uint64_t> sums(pieces.size());
    auto read = [&pieces, &sums](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k) sums[k] = HostSum(pieces[k].data, pieces[k].width, pieces[k].begin,
                                                               pieces[k].end);
    };
    c->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(pieces.size(), 2 * kHostPiece, read);
    for (size_t k = 0; k < pieces.size(); ++k) digests[pieces[k].tensor] += sums[k];
    auto flat = out->flat<int64_t>();
    for (int i = 0; i < c->num_inputs(); ++i) flat(i) = static_cast<int64_t>(digests[i]);
  }
};
REGISTER_KERNEL_BUILDER(Name("OpbisectFingerprint").Device(tf::DEVICE_CPU), FingerprintCpu);

#ifdef OPBISECT_WITH_CUDA
// Enqueues the digests of every input of `c` into `digests` on `stream`; returns a CUDA error code.
static int LaunchAll(tf::OpKernelContext* c, uint64_t* digests, void* stream) {
  int err = ZeroDigests(digests, c->num_inputs(), stream);
  Batch batch;
  std::memset(&batch, 0, sizeof(batch));
  int base = 0;
  auto flush = [&]() -> int {
    if (batch.count == 0) return 0;
    int e = LaunchFingerprint(batch, digests + base, stream);
    base += batch.count;
    batch.count = 0;
    return e;
  };
  for (int i = 0; i < c->num_inputs() && err == 0; ++i) {
    const tf::Tensor& t = c->input(i);
    int width;
    int64_t words;
    Words(t, &width, &words);
    const int k = batch.count;
    if (k == 0) batch.first_block[0] = 0;
    batch.ptr[k] = t.tensor_data().data();
    batch.words[k] = words;
    batch.width[k] = width;
    // Empty tensors still get one block: it adds the size term (zero words) and nothing else.
    batch.first_block[k + 1] = batch.first_block[k] + (words + kChunk - 1) / kChunk + (words == 0 ? 1 : 0);
    batch.count = k + 1;
    if (batch.count == kBatch) err = flush();
  }
  return err == 0 ? flush() : err;
}

// The inputs a side stream still reads, each op's held until the event recorded after its reads completes
// (side_stream.h, rule 2), or until the step's stream has waited for the side stream after they were held (rule 3).
// Ops run on several threads at once, so a queue's order is not the order of its events: each release scans it.
class HeldInputs {
 public:
  static HeldInputs& Get() {
    static HeldInputs* held = new HeldInputs();  // never destroyed: an op may run while the process exits
    return *held;
  }
  void Hold(void* side, void* event, std::vector<tf::Tensor> tensors) {
    std::lock_guard<std::mutex> lock(mu_);
    queues_[side].push_back(Entry{next_++, event, std::move(tensors)});
  }
  // Everything held so far: taken before the step's stream waits, whose wait then covers all of it.
  uint64_t Ticket() {
    std::lock_guard<std::mutex> lock(mu_);
    return next_;
  }
  // Lets go of the inputs whose reads are done; returns a CUDA error code (0: none).
  int ReleaseDone(void* side) {
    int err = 0;
    Release(side, [&err](const Entry& e) {
      const int state = EventDone(e.event);
      if (state < 0) err = -state;
      return state == 1;
    });
    return err;
  }
  // Lets go of the inputs held before `ticket`, once the step's stream waits for the side stream (rule 3).
  void ReleaseBefore(void* side, uint64_t ticket) {
    Release(side, [ticket](const Entry& e) { return e.ticket < ticket; });
  }

 private:
  struct Entry {
    uint64_t ticket;
    void* event;
    std::vector<tf::Tensor> tensors;
  };
  template <typename Done>
  void Release(void* side, Done done) {
    std::vector<Entry> gone;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& queue = queues_[side];
      for (auto it = queue.begin(); it != queue.end();) {
        if (done(*it)) {
          gone.push_back(std::move(*it));
          it = queue.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& entry : gone) DropEvent(entry.event);
  }  // the tensors go here, outside the lock: freeing them takes the allocator's

  std::mutex mu_;
  uint64_t next_ = 0;
  std::map<void*, std::deque<Entry>> queues_;
};

static std::vector<tf::Tensor> Inputs(tf::OpKernelContext* c) {
  std::vector<tf::Tensor> inputs;
  inputs.reserve(c->num_inputs());
  for (int i = 0; i < c->num_inputs(); ++i) inputs.push_back(c->input(i));  // a copy holds the buffer
  return inputs;
}

class FingerprintGpu : public tf::OpKernel {
 public:
  explicit FingerprintGpu(tf::OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("side_stream", &side_stream_));
  }
  void Compute(tf::OpKernelContext* c) override {
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, tf::TensorShape({c->num_inputs()}), &out));
    void* main = nullptr;
    OP_REQUIRES_OK(c, GpuStream(c, "OpbisectFingerprint", &main));
    uint64_t* digests = reinterpret_cast<uint64_t*>(out->flat<int64_t>().data());
    if (!side_stream_) {
      OP_REQUIRES_OK(c, CudaStatus("OpbisectFingerprint", LaunchAll(c, digests, main)));
      return;
    }
    void *side = nullptr, *read = nullptr;
    OP_REQUIRES_OK(c, CudaStatus("OpbisectFingerprint: side stream", SideAfter(main, &side)));
    OP_REQUIRES_OK(c, CudaStatus("OpbisectFingerprint: earlier reads", HeldInputs::Get().ReleaseDone(side)));
    OP_REQUIRES_OK(c, CudaStatus("OpbisectFingerprint", LaunchAll(c, digests, side)));
    OP_REQUIRES_OK(c, CudaStatus("OpbisectFingerprint: event", RecordOn(side, &read)));
    HeldInputs::Get().Hold(side, read, Inputs(c));
  }

 private:
  bool side_stream_ = false;
};
REGISTER_KERNEL_BUILDER(Name("OpbisectFingerprint").Device(tf::DEVICE_GPU), FingerprintGpu);

class AwaitDigestsGpu : public tf::OpKernel {
 public:
  explicit AwaitDigestsGpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    void *main = nullptr, *side = nullptr;
    OP_REQUIRES_OK(c, GpuStream(c, "OpbisectAwaitDigests", &main));
    // Only what was held before the wait is covered by it: a loop body's digests may be read on the side stream
    // while this runs.
    const uint64_t ticket = HeldInputs::Get().Ticket();
    OP_REQUIRES_OK(c, CudaStatus("OpbisectAwaitDigests", MainAfterSide(main, &side)));
    if (side != nullptr) HeldInputs::Get().ReleaseBefore(side, ticket);
    PassThrough(c);
  }
};
REGISTER_KERNEL_BUILDER(Name("OpbisectAwaitDigests").Device(tf::DEVICE_GPU), AwaitDigestsGpu);
#endif

}  // namespace opbisect
