// TensorFlow ops `OpbisectSoftmaxXent`: features T[n, c], labels Tlabels[n] -> loss T[n], backprop T[n, c];
// `OpbisectColumnSum`: x T[rows, cols] -> T[cols]; `OpbisectChannelSum`: x T[n, c, s] -> T[c] (dense.h). The CPU
// kernels add in the GPU kernels' order (the same threads' partition and tree): the column and channel sums agree
// bit for bit, the cross-entropy where the machines' exp and log round alike. GPU kernels when built with
// OPBISECT_WITH_CUDA.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "dense.h"
#include "gpu_op.h"

namespace opbisect {
namespace tf = ::tensorflow;

REGISTER_OP("OpbisectSoftmaxXent")
    .Input("features: T")
    .Input("labels: Tlabels")
    .Output("loss: T")
    .Output("backprop: T")
    .Attr("T: {half, bfloat16, float}")
    .Attr("Tlabels: {int32, int64} = DT_INT64")
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      tf::shape_inference::ShapeHandle features, labels;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &features));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &labels));
      tf::shape_inference::DimensionHandle n;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(features, 0), c->Dim(labels, 0), &n));
      c->set_output(0, c->Vector(n));
      c->set_output(1, c->Matrix(n, c->Dim(features, 1)));
      return absl::OkStatus();
    });

REGISTER_OP("OpbisectColumnSum")
    .Input("x: T")
    .Output("sums: T")
    .Attr("T: {half, bfloat16, float}")
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      tf::shape_inference::ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      c->set_output(0, c->Vector(c->Dim(x, 1)));
      return absl::OkStatus();
    });

REGISTER_OP("OpbisectChannelSum")
    .Input("x: T")
    .Output("sums: T")
    .Attr("T: {half, bfloat16, float}")
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      tf::shape_inference::ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &x));
      c->set_output(0, c->Vector(c->Dim(x, 1)));
      return absl::OkStatus();
    });

REGISTER_OP("OpbisectResizeBilinearGrad")
    .Input("grads: float")
    .Input("original_image: T")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("align_corners: bool = false")
    .Attr("half_pixel_centers: bool = false")
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      tf::shape_inference::ShapeHandle image;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &image));
      c->set_output(0, image);
      return absl::OkStatus();
    });

namespace {

absl::Status Prepare(tf::OpKernelContext* c, int64_t* n, int64_t* classes, tf::Tensor** loss, tf::Tensor** backprop) {
  const tf::Tensor& features = c->input(0);
  const tf::Tensor& labels = c->input(1);
  if (features.dims() != 2 || labels.dims() != 1 || labels.dim_size(0) != features.dim_size(0))
    return tf::errors::InvalidArgument("OpbisectSoftmaxXent: features must be [n, c] and labels [n]");
  *n = features.dim_size(0);
  *classes = features.dim_size(1);
  TF_RETURN_IF_ERROR(c->allocate_output(0, labels.shape(), loss));
  return c->allocate_output(1, features.shape(), backprop);
}

int64_t Label(const tf::Tensor& labels, int64_t row) {
  return labels.dtype() == tf::DT_INT64 ? labels.flat<int64_t>()(row) : labels.flat<int32_t>()(row);
}

template <typename T>
class SoftmaxXentCpu : public tf::OpKernel {
 public:
  explicit SoftmaxXentCpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    int64_t n, classes;
    tf::Tensor *loss_t, *backprop_t;
    OP_REQUIRES_OK(c, Prepare(c, &n, &classes, &loss_t, &backprop_t));
    const T* features = c->input(0).flat<T>().data();
    T* loss = loss_t->flat<T>().data();
    T* backprop = backprop_t->flat<T>().data();
    const int threads = XentThreads(classes);
    std::vector<float> ms(threads), ss(threads);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t row = 0; row < n; ++row) {
      const T* x = features + row * classes;
      for (int t = 0; t < threads; ++t) {  // each GPU thread's fold, in its order
        ms[t] = -std::numeric_limits<float>::infinity();
        ss[t] = 0.0f;
        for (int64_t j = t; j < classes; j += threads) XentFold(static_cast<float>(x[j]), &ms[t], &ss[t]);
      }
      for (int stride = threads / 2; stride > 0; stride /= 2)  // the block's tree
        for (int t = 0; t < stride; ++t) XentMerge(ms[t + stride], ss[t + stride], &ms[t], &ss[t]);
      const float top = ms[0], sum = ss[0];
      const int64_t label = Label(c->input(1), row);
      const bool valid = label >= 0 && label < classes;
      for (int64_t j = 0; j < classes; ++j) {
        const float p = std::exp(static_cast<float>(x[j]) - top) / sum;
        backprop[row * classes + j] = static_cast<T>(valid ? p - (j == label ? 1.0f : 0.0f) : nan);
      }
      loss[row] = static_cast<T>(valid ? std::log(sum) - (static_cast<float>(x[label]) - top) : nan);
    }
  }
};

absl::Status PrepareColumns(tf::OpKernelContext* c, int64_t* rows, int64_t* cols, tf::Tensor** sums) {
  const tf::Tensor& x = c->input(0);
  if (x.dims() != 2) return tf::errors::InvalidArgument("OpbisectColumnSum: x must be [rows, cols]");
  *rows = x.dim_size(0);
  *cols = x.dim_size(1);
  return c->allocate_output(0, tf::TensorShape({*cols}), sums);
}

template <typename T>
class ColumnSumCpu : public tf::OpKernel {
 public:
  explicit ColumnSumCpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    int64_t rows, cols;
    tf::Tensor* sums_t;
    OP_REQUIRES_OK(c, PrepareColumns(c, &rows, &cols, &sums_t));
    const T* x = c->input(0).flat<T>().data();
    T* sums = sums_t->flat<T>().data();
    std::vector<float> total(cols, 0.0f), chunk(cols);
    const int64_t size = ColumnChunk(rows);
    for (int64_t first = 0; first < rows; first += size) {  // each chunk from zero, then into the total
      std::fill(chunk.begin(), chunk.end(), 0.0f);
      const int64_t last = std::min(rows, first + size);
      for (int64_t r = first; r < last; ++r)
        for (int64_t j = 0; j < cols; ++j) chunk[j] += static_cast<float>(x[r * cols + j]);
      for (int64_t j = 0; j < cols; ++j) total[j] += chunk[j];
    }
    for (int64_t j = 0; j < cols; ++j) sums[j] = static_cast<T>(total[j]);
  }
};

absl::Status PrepareChannels(tf::OpKernelContext* c, int64_t* n, int64_t* channels, int64_t* s, tf::Tensor** sums) {
  const tf::Tensor& x = c->input(0);
  if (x.dims() != 3) return tf::errors::InvalidArgument("OpbisectChannelSum: x must be [n, c, s]");
  *n = x.dim_size(0);
  *channels = x.dim_size(1);
  *s = x.dim_size(2);
  return c->allocate_output(0, tf::TensorShape({*channels}), sums);
}

// One (i, k)'s positions as the GPU block adds them: each thread's entries in order, then the block's tree.
template <typename T>
float SumPositions(const T* row, int64_t s, std::vector<float>& lanes) {
  const int threads = static_cast<int>(lanes.size());
  for (int t = 0; t < threads; ++t) {
    lanes[t] = 0.0f;
    for (int64_t j = t; j < s; j += threads) lanes[t] += static_cast<float>(row[j]);
  }
  for (int stride = threads / 2; stride > 0; stride /= 2)
    for (int t = 0; t < stride; ++t) lanes[t] += lanes[t + stride];
  return lanes[0];
}

template <typename T>
class ChannelSumCpu : public tf::OpKernel {
 public:
  explicit ChannelSumCpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    int64_t n, channels, s;
    tf::Tensor* sums_t;
    OP_REQUIRES_OK(c, PrepareChannels(c, &n, &channels, &s, &sums_t));
    const T* x = c->input(0).flat<T>().data();
    std::vector<float> total(channels, 0.0f), lanes(ChannelThreads(s));
    for (int64_t i = 0; i < n; ++i)  // each channel's n sums in order, from zero
      for (int64_t k = 0; k < channels; ++k) total[k] += SumPositions(x + (i * channels + k) * s, s, lanes);
    T* sums = sums_t->flat<T>().data();
    for (int64_t k = 0; k < channels; ++k) sums[k] = static_cast<T>(total[k]);
  }
};

// The resize gradient's shapes and axes; the output allocated (the original image's shape).
class ResizeGradBase : public tf::OpKernel {
 public:
  explicit ResizeGradBase(tf::OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("align_corners", &align_corners_));
    OP_REQUIRES_OK(c, c->GetAttr("half_pixel_centers", &half_pixel_));
  }

 protected:
  absl::Status Prepare(tf::OpKernelContext* c, ResizeAxis* ay, ResizeAxis* ax, tf::Tensor** out) const {
    const tf::Tensor& grads = c->input(0);
    const tf::Tensor& image = c->input(1);
    if (grads.dims() != 4 || image.dims() != 4 || grads.dim_size(0) != image.dim_size(0) ||
        grads.dim_size(3) != image.dim_size(3))
      return tf::errors::InvalidArgument("OpbisectResizeBilinearGrad: grads and original_image must be [n, h, w, c] "
                                         "with the same n and c");
    *ay = MakeResizeAxis(image.dim_size(1), grads.dim_size(1), align_corners_, half_pixel_);
    *ax = MakeResizeAxis(image.dim_size(2), grads.dim_size(2), align_corners_, half_pixel_);
    return c->allocate_output(0, image.shape(), out);
  }

 private:
  bool align_corners_ = false, half_pixel_ = false;
};

template <typename T>
class ResizeGradCpu : public ResizeGradBase {
 public:
  explicit ResizeGradCpu(tf::OpKernelConstruction* c) : ResizeGradBase(c) {}
  void Compute(tf::OpKernelContext* c) override {
    ResizeAxis ay, ax;
    tf::Tensor* out_t;
    OP_REQUIRES_OK(c, Prepare(c, &ay, &ax, &out_t));
    const float* grads = c->input(0).flat<float>().data();
    T* out = out_t->flat<T>().data();
    const int64_t n = out_t->dim_size(0), channels = out_t->dim_size(3);
    std::vector<int32_t> words(ResizeTableWords(ay, ax));  // the tables as the GPU's first kernel fills them
    for (int64_t e = 0; e < ResizeTableEntries(ay, ax); ++e) ResizeTableEntry(ay, ax, e, words.data());
    ResizeTables ty, tx;
    ResizeTablesIn(ay, ax, words.data(), &ty, &tx);
    for (int64_t image = 0, e = 0; image < n; ++image)  // each element as one GPU thread computes it
      for (int64_t i = 0; i < ay.in; ++i)
        for (int64_t j = 0; j < ax.in; ++j)
          for (int64_t k = 0; k < channels; ++k, ++e)
            out[e] = static_cast<T>(ResizeGradAt(grads + image * ay.out * ax.out * channels, ty, tx, ax.out, channels,
                                                 i, j, k));
  }
};

#define OPBISECT_RESIZE(DEVICE, KERNEL)                                                                          \
  REGISTER_KERNEL_BUILDER(Name("OpbisectResizeBilinearGrad").Device(DEVICE).TypeConstraint<Eigen::half>("T"),    \
                          KERNEL<Eigen::half>);                                                                  \
  REGISTER_KERNEL_BUILDER(Name("OpbisectResizeBilinearGrad").Device(DEVICE).TypeConstraint<Eigen::bfloat16>("T"), \
                          KERNEL<Eigen::bfloat16>);                                                              \
  REGISTER_KERNEL_BUILDER(Name("OpbisectResizeBilinearGrad").Device(DEVICE).TypeConstraint<float>("T"),          \
                          KERNEL<float>);                                                                        \
  REGISTER_KERNEL_BUILDER(Name("OpbisectResizeBilinearGrad").Device(DEVICE).TypeConstraint<double>("T"),         \
                          KERNEL<double>)
OPBISECT_RESIZE(tf::DEVICE_CPU, ResizeGradCpu);

// The three ops, for every dtype they take, on one device with its kernels.
#define OPBISECT_DENSE_KERNELS(DEVICE, XENT, COLUMNS, CHANNELS, T)                                              \
  REGISTER_KERNEL_BUILDER(Name("OpbisectSoftmaxXent").Device(DEVICE).TypeConstraint<T>("T"), XENT<T>);  \
  REGISTER_KERNEL_BUILDER(Name("OpbisectColumnSum").Device(DEVICE).TypeConstraint<T>("T"), COLUMNS<T>); \
  REGISTER_KERNEL_BUILDER(Name("OpbisectChannelSum").Device(DEVICE).TypeConstraint<T>("T"), CHANNELS<T>)
#define OPBISECT_DENSE(DEVICE, XENT, COLUMNS, CHANNELS)                  \
  OPBISECT_DENSE_KERNELS(DEVICE, XENT, COLUMNS, CHANNELS, Eigen::half);     \
  OPBISECT_DENSE_KERNELS(DEVICE, XENT, COLUMNS, CHANNELS, Eigen::bfloat16); \
  OPBISECT_DENSE_KERNELS(DEVICE, XENT, COLUMNS, CHANNELS, float)
OPBISECT_DENSE(tf::DEVICE_CPU, SoftmaxXentCpu, ColumnSumCpu, ChannelSumCpu);

#ifdef OPBISECT_WITH_CUDA
template <typename T> constexpr int kDenseType = kDenseF32;
template <> constexpr int kDenseType<Eigen::half> = kDenseF16;
template <> constexpr int kDenseType<Eigen::bfloat16> = kDenseBF16;
template <> constexpr int kDenseType<double> = kDenseF64;  // the resize gradient's alone

template <typename T>
class SoftmaxXentGpu : public tf::OpKernel {
 public:
  explicit SoftmaxXentGpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    int64_t n, classes;
    tf::Tensor *loss, *backprop;
    OP_REQUIRES_OK(c, Prepare(c, &n, &classes, &loss, &backprop));
    if (n == 0) return;
    void* stream;
    OP_REQUIRES_OK(c, GpuStream(c, "OpbisectSoftmaxXent", &stream));
    const tf::Tensor& labels = c->input(1);
    OP_REQUIRES_OK(c, CudaStatus("OpbisectSoftmaxXent", LaunchSoftmaxXent(
        kDenseType<T>, c->input(0).tensor_data().data(), labels.tensor_data().data(), labels.dtype() == tf::DT_INT64,
        n, classes, const_cast<char*>(loss->tensor_data().data()), const_cast<char*>(backprop->tensor_data().data()),
        stream)));
  }
};

template <typename T>
class ColumnSumGpu : public tf::OpKernel {
 public:
  explicit ColumnSumGpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    int64_t rows, cols;
    tf::Tensor* sums;
    OP_REQUIRES_OK(c, PrepareColumns(c, &rows, &cols, &sums));
    if (cols == 0) return;
    void* stream;
    OP_REQUIRES_OK(c, GpuStream(c, "OpbisectColumnSum", &stream));
    tf::Tensor part;  // at least one chunk: no rows sum to zeros
    OP_REQUIRES_OK(c, c->allocate_temp(tf::DT_FLOAT, tf::TensorShape({std::max<int64_t>(1, ColumnChunks(rows)) * cols}),
                                       &part));
    OP_REQUIRES_OK(c, CudaStatus("OpbisectColumnSum", LaunchColumnSum(
        kDenseType<T>, c->input(0).tensor_data().data(), rows, cols, const_cast<char*>(sums->tensor_data().data()),
        part.flat<float>().data(), stream)));
  }
};

template <typename T>
class ChannelSumGpu : public tf::OpKernel {
 public:
  explicit ChannelSumGpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    int64_t n, channels, s;
    tf::Tensor* sums;
    OP_REQUIRES_OK(c, PrepareChannels(c, &n, &channels, &s, &sums));
    if (channels == 0) return;
    void* stream;
    OP_REQUIRES_OK(c, GpuStream(c, "OpbisectChannelSum", &stream));
    tf::Tensor part;  // at least one row: no batch sums to zeros
    OP_REQUIRES_OK(c, c->allocate_temp(tf::DT_FLOAT, tf::TensorShape({std::max<int64_t>(1, n) * channels}), &part));
    OP_REQUIRES_OK(c, CudaStatus("OpbisectChannelSum", LaunchChannelSum(
        kDenseType<T>, c->input(0).tensor_data().data(), n, channels, s, const_cast<char*>(sums->tensor_data().data()),
        part.flat<float>().data(), stream)));
  }
};

OPBISECT_DENSE(tf::DEVICE_GPU, SoftmaxXentGpu, ColumnSumGpu, ChannelSumGpu);

template <typename T>
class ResizeGradGpu : public ResizeGradBase {
 public:
  explicit ResizeGradGpu(tf::OpKernelConstruction* c) : ResizeGradBase(c) {}
  void Compute(tf::OpKernelContext* c) override {
    ResizeAxis ay, ax;
    tf::Tensor* out;
    OP_REQUIRES_OK(c, Prepare(c, &ay, &ax, &out));
    tf::Tensor tables;
    OP_REQUIRES_OK(c, c->allocate_temp(tf::DT_INT32, tf::TensorShape({ResizeTableWords(ay, ax)}), &tables));
    void* stream;
    OP_REQUIRES_OK(c, GpuStream(c, "OpbisectResizeBilinearGrad", &stream));
    OP_REQUIRES_OK(c, CudaStatus("OpbisectResizeBilinearGrad", LaunchResizeGrad(
        kDenseType<T>, c->input(0).flat<float>().data(), out->dim_size(0), ay, ax, out->dim_size(3),
        tables.flat<int32_t>().data(), const_cast<char*>(out->tensor_data().data()), stream)));
  }
};

OPBISECT_RESIZE(tf::DEVICE_GPU, ResizeGradGpu);
#endif

}  // namespace
}  // namespace opbisect
