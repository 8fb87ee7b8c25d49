// TensorFlow op `OpbisectFingerprint`: tensors (any numeric dtypes) -> int64[N] digests, see fingerprint.h.
// A CPU kernel always; a GPU kernel when built with OPBISECT_WITH_CUDA (the .cu beside this file).
#include <cstring>

#include "fingerprint.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

#ifdef OPBISECT_WITH_CUDA
#include "xla/stream_executor/stream.h"
#endif

namespace opbisect {
namespace tf = ::tensorflow;

REGISTER_OP("OpbisectFingerprint")
    .Input("tensors: T")
    .Output("digests: int64")
    .Attr("T: list(type) >= 1")
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Vector(c->num_inputs()));
      return absl::OkStatus();
    });

// Word width and count of a tensor: complex128 counts as two int64 words per element.
static void Words(const tf::Tensor& t, int* width, int64_t* words) {
  const int64_t bytes = static_cast<int64_t>(t.TotalBytes());
  const int size = tf::DataTypeSize(t.dtype());
  *width = size >= 8 ? 8 : size;
  *words = *width > 0 ? bytes / *width : 0;
}

template <typename W>
static uint64_t HostSum(const void* data, int64_t words) {
  const W* p = static_cast<const W*>(data);
  uint64_t acc = 0;
  for (int64_t j = 0; j < words; ++j) {
    acc += static_cast<uint64_t>(static_cast<int64_t>(p[j])) * ((2ull * static_cast<uint64_t>(j) + 1ull) * kGolden);
  }
  return acc + static_cast<uint64_t>(words) * kSizeMix;
}

class FingerprintCpu : public tf::OpKernel {
 public:
  explicit FingerprintCpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, tf::TensorShape({c->num_inputs()}), &out));
    auto digests = out->flat<int64_t>();
    for (int i = 0; i < c->num_inputs(); ++i) {
      const tf::Tensor& t = c->input(i);
      int width;
      int64_t words;
      Words(t, &width, &words);
      const void* data = t.tensor_data().data();
      uint64_t d = width == 1 ? HostSum<int8_t>(data, words) : width == 2 ? HostSum<int16_t>(data, words)
                 : width == 4 ? HostSum<int32_t>(data, words) : HostSum<int64_t>(data, words);
      digests(i) = static_cast<int64_t>(d);
    }
  }
};
REGISTER_KERNEL_BUILDER(Name("OpbisectFingerprint").Device(tf::DEVICE_CPU), FingerprintCpu);

#ifdef OPBISECT_WITH_CUDA
class FingerprintGpu : public tf::OpKernel {
 public:
  explicit FingerprintGpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, tf::TensorShape({c->num_inputs()}), &out));
    auto* stream = c->op_device_context()->stream();
    OP_REQUIRES(c, stream != nullptr, tf::errors::Internal("OpbisectFingerprint: no GPU stream"));
    void* raw = stream->platform_specific_handle().stream;
    uint64_t* digests = reinterpret_cast<uint64_t*>(out->flat<int64_t>().data());
    int zeroed = ZeroDigests(digests, c->num_inputs(), raw);
    OP_REQUIRES(c, zeroed == 0, tf::errors::Internal("OpbisectFingerprint: CUDA memset failed: ", zeroed));
    Batch batch;
    int base = 0;
    auto flush = [&]() -> int {
      if (batch.count == 0) return 0;
      int err = LaunchFingerprint(batch, digests + base, raw);
      base += batch.count;
      batch.count = 0;
      return err;
    };
    std::memset(&batch, 0, sizeof(batch));
    for (int i = 0; i < c->num_inputs(); ++i) {
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
      if (batch.count == kBatch) {
        int err = flush();
        OP_REQUIRES(c, err == 0, tf::errors::Internal("OpbisectFingerprint: CUDA launch failed: ", err));
      }
    }
    int err = flush();
    OP_REQUIRES(c, err == 0, tf::errors::Internal("OpbisectFingerprint: CUDA launch failed: ", err));
  }
};
REGISTER_KERNEL_BUILDER(Name("OpbisectFingerprint").Device(tf::DEVICE_GPU), FingerprintGpu);
#endif

}  // namespace opbisect
