// TensorFlow op `OpbisectCombine`: keys int32[n], rows T[n, ...], pad int32 -> distinct int32[n], sums T[n, ...]
// (see combine.h). A CPU kernel always, adding in exactly the GPU kernel's order (so the two agree bit for bit);
// a GPU kernel when built with OPBISECT_WITH_CUDA.
#include <algorithm>
#include <numeric>
#include <vector>

#include "combine.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

#ifdef OPBISECT_WITH_CUDA
#include "xla/stream_executor/stream.h"
#endif

namespace opbisect {
namespace tf = ::tensorflow;

REGISTER_OP("OpbisectCombine")
    .Input("keys: int32")
    .Input("rows: T")
    .Input("pad: int32")
    .Output("distinct: int32")
    .Output("sums: T")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      tf::shape_inference::ShapeHandle keys, rows;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &keys));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(1), 1, &rows));
      tf::shape_inference::DimensionHandle n;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(keys, 0), c->Dim(rows, 0), &n));
      c->set_output(0, c->Vector(n));
      tf::shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(c->ReplaceDim(rows, 0, n, &out));
      c->set_output(1, out);
      return absl::OkStatus();
    });

namespace {

// The checks and outputs both kernels share.
absl::Status Prepare(tf::OpKernelContext* c, int64_t* n, int64_t* d, int32_t* pad, tf::Tensor** distinct,
                     tf::Tensor** sums) {
  const tf::Tensor& keys = c->input(0);
  const tf::Tensor& rows = c->input(1);
  if (keys.dims() != 1 || rows.dims() < 1 || rows.dim_size(0) != keys.dim_size(0))
    return tf::errors::InvalidArgument("OpbisectCombine: keys must be [n] and rows [n, ...]");
  if (!tf::TensorShapeUtils::IsScalar(c->input(2).shape()))
    return tf::errors::InvalidArgument("OpbisectCombine: pad must be a scalar");
  *n = keys.dim_size(0);
  if (*n >= (int64_t{1} << 31)) return tf::errors::InvalidArgument("OpbisectCombine: 2^31 keys or more");
  *d = *n > 0 ? rows.NumElements() / *n : 0;
  *pad = c->input(2).scalar<int32_t>()();
  TF_RETURN_IF_ERROR(c->allocate_output(0, keys.shape(), distinct));
  return c->allocate_output(1, rows.shape(), sums);
}

template <typename T> struct Acc { using type = T; };
template <> struct Acc<Eigen::half> { using type = float; };
template <> struct Acc<Eigen::bfloat16> { using type = float; };

template <typename T>
class CombineCpu : public tf::OpKernel {
 public:
  explicit CombineCpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    using A = typename Acc<T>::type;
    int64_t n, d;
    int32_t pad;
    tf::Tensor *distinct_t, *sums_t;
    OP_REQUIRES_OK(c, Prepare(c, &n, &d, &pad, &distinct_t, &sums_t));
    if (n == 0) return;
    const int32_t* keys = c->input(0).flat<int32_t>().data();
    const T* rows = c->input(1).flat<T>().data();
    int32_t* distinct = distinct_t->flat<int32_t>().data();
    T* sums = sums_t->flat<T>().data();
    std::vector<int64_t> perm(n);
    std::iota(perm.begin(), perm.end(), int64_t{0});
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
    std::vector<A> run(d), segment(d);
    int64_t r = 0;
    for (int64_t begin = 0; begin < n; ++r) {
      const int32_t key = keys[perm[begin]];
      int64_t end = begin + 1;
      while (end < n && keys[perm[end]] == key) ++end;
      std::fill(run.begin(), run.end(), A(0));
      for (int64_t s = begin; s < end;) {  // the segments: cut at the run's ends and at every chunk boundary
        const int64_t e = std::min(end, (s / kCombineChunk + 1) * kCombineChunk);
        std::fill(segment.begin(), segment.end(), A(0));
        for (int64_t q = s; q < e; ++q) {
          const T* row = rows + perm[q] * d;
          for (int64_t j = 0; j < d; ++j) segment[j] += static_cast<A>(row[j]);
        }
        for (int64_t j = 0; j < d; ++j) run[j] += segment[j];
        s = e;
      }
      distinct[r] = key;
      for (int64_t j = 0; j < d; ++j) sums[r * d + j] = static_cast<T>(run[j]);
      begin = end;
    }
    std::fill(distinct + r, distinct + n, pad);
    std::fill(sums + r * d, sums + n * d, static_cast<T>(A(0)));
  }
};

#define OPBISECT_CPU(T) \
  REGISTER_KERNEL_BUILDER(Name("OpbisectCombine").Device(tf::DEVICE_CPU).TypeConstraint<T>("T"), CombineCpu<T>)
OPBISECT_CPU(Eigen::half);
OPBISECT_CPU(Eigen::bfloat16);
OPBISECT_CPU(float);
OPBISECT_CPU(double);

#ifdef OPBISECT_WITH_CUDA
template <typename T> constexpr int kType = kCombineF32;
template <> constexpr int kType<double> = kCombineF64;
template <> constexpr int kType<Eigen::half> = kCombineF16;
template <> constexpr int kType<Eigen::bfloat16> = kCombineBF16;

template <typename T>
class CombineGpu : public tf::OpKernel {
 public:
  explicit CombineGpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    int64_t n, d;
    int32_t pad;
    tf::Tensor *distinct, *sums;
    OP_REQUIRES_OK(c, Prepare(c, &n, &d, &pad, &distinct, &sums));
    if (n == 0) return;
    auto* stream = c->op_device_context()->stream();
    OP_REQUIRES(c, stream != nullptr, tf::errors::Internal("OpbisectCombine: no GPU stream"));
    const size_t bytes = CombineScratchBytes(n, d, kType<T>);
    tf::Tensor scratch;
    OP_REQUIRES_OK(c, c->allocate_temp(tf::DT_INT8, tf::TensorShape({static_cast<int64_t>(bytes)}), &scratch));
    const int err = LaunchCombine(kType<T>, c->input(0).flat<int32_t>().data(), c->input(1).tensor_data().data(),
                                  n, d, pad, distinct->flat<int32_t>().data(),
                                  const_cast<char*>(sums->tensor_data().data()), scratch.flat<int8_t>().data(),
                                  bytes, stream->platform_specific_handle().stream);
    OP_REQUIRES(c, err == 0, tf::errors::Internal("OpbisectCombine: CUDA error ", err));
  }
};

#define OPBISECT_GPU(T)                                                                                  \
  REGISTER_KERNEL_BUILDER(                                                                               \
      Name("OpbisectCombine").Device(tf::DEVICE_GPU).TypeConstraint<T>("T").HostMemory("pad"), \
      CombineGpu<T>)
OPBISECT_GPU(Eigen::half);
OPBISECT_GPU(Eigen::bfloat16);
OPBISECT_GPU(float);
OPBISECT_GPU(double);
#endif

}  // namespace
}  // namespace opbisect
