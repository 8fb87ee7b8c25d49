// TensorFlow ops `OpbisectCombine`: keys int32[n], rows T[n, ...], pad int32 -> distinct int32[n], sums T[n, ...],
// `OpbisectScatterCombine`: a variable, keys[...], rows[..., ...] -> the variable's rows updated in place, and
// `OpbisectSegmentSum`: keys[n], rows T[n, ...], num_segments -> T[num_segments, ...], the scatter's sums added into
// zeros (see combine.h). CPU kernels always, adding in exactly the GPU kernels' order (so the two agree bit for
// bit); GPU kernels when built with OPBISECT_WITH_CUDA. And `OpbisectScatterInOrder` (CPU only): the scatter of a
// serial loop, each update added to its row in index order, the rows shared out among the CPU's threads.
#include <algorithm>
#include <numeric>
#include <vector>

#include "combine.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/lib/core/threadpool.h"

#include "gpu_op.h"

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

// The two scatters' signature: a variable, keys[...], rows[..., ...]; the variable's rows updated in place.
#define OPBISECT_SCATTER_OP(name)                                               \
  REGISTER_OP(name)                                                              \
      .Input("resource: resource")                                               \
      .Input("keys: Tindices")                                                   \
      .Input("rows: T")                                                          \
      .Attr("T: {half, bfloat16, float, double}")                                \
      .Attr("Tindices: {int32, int64}")                                          \
      .Attr("subtract: bool = false")                                            \
      .SetIsStateful()                                                           \
      .SetShapeFn([](tf::shape_inference::InferenceContext* c) { return absl::OkStatus(); })

OPBISECT_SCATTER_OP("OpbisectScatterCombine");

// The CPU's scatter patch: table[keys[i]] += rows[i] (or -=) for i = 0, 1, ... in order, as a serial loop adds, so
// the same bits whatever the threads. TensorFlow's CPU kernel adds from several threads at once, which races on a
// repeated key; the sorted combine above adds in the GPU's order, but its sort is one thread's. This shares the rows
// out instead: each thread owns a range of rows and adds, in index order, the updates that fall in it (0.27-0.35x
// the racy kernel in benchmarks/README.md's CPU sweep). A key outside the table is an error, as on TensorFlow's CPU.
OPBISECT_SCATTER_OP("OpbisectScatterInOrder");

// unsorted_segment_sum(rows, keys, num_segments) with one write per output row and no atomics: the combine's sums
// written straight into the zeroed output (the scatter's kernel over a table of zeros), where the combine's padded
// sums would be written, read back and added by TensorFlow's segment sum. Keys outside [0, num_segments) dropped.
REGISTER_OP("OpbisectSegmentSum")
    .Input("keys: Tindices")
    .Input("rows: T")
    .Input("num_segments: Tnumsegments")
    .Output("output: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("Tindices: {int32, int64}")
    .Attr("Tnumsegments: {int32, int64} = DT_INT32")
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      tf::shape_inference::ShapeHandle keys, rows, tail, out;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &keys));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(1), 1, &rows));
      tf::shape_inference::DimensionHandle segments;
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(2, &segments));
      TF_RETURN_IF_ERROR(c->Subshape(rows, 1, &tail));
      TF_RETURN_IF_ERROR(c->Concatenate(c->Vector(segments), tail, &out));
      c->set_output(0, out);
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

// The combine's adds in the GPU kernels' order (combine.h): for each run of equal keys, in ascending key order,
// emit(key, its sum in A).
template <typename T, typename A, typename Emit>
void ForEachSum(const int32_t* keys, const T* rows, int64_t n, int64_t d, Emit emit) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
  std::vector<A> run(d), segment(d);
  for (int64_t begin = 0; begin < n;) {
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
    emit(key, run);
    begin = end;
  }
}

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
    int32_t* distinct = distinct_t->flat<int32_t>().data();
    T* sums = sums_t->flat<T>().data();
    int64_t r = 0;
    ForEachSum<T, A>(c->input(0).flat<int32_t>().data(), c->input(1).flat<T>().data(), n, d,
                     [&](int32_t key, const std::vector<A>& run) {
                       distinct[r] = key;
                       for (int64_t j = 0; j < d; ++j) sums[r * d + j] = static_cast<T>(run[j]);
                       ++r;
                     });
    std::fill(distinct + r, distinct + n, pad);
    std::fill(sums + r * d, sums + n * d, static_cast<T>(A(0)));
  }
};

// table[k] = table[k] + sum(k) (or - sum(k)) for each distinct key k in [0, table_rows), in the GPU kernels' order
// and rounding (the sum rounded to T first); other keys dropped (read as table_rows, which sorts last, as there).
template <typename T>
void AddSums(const tf::Tensor& keys, const tf::Tensor& rows, int64_t n, int64_t d, int64_t table_rows, bool subtract,
             T* table) {
  using A = typename Acc<T>::type;
  std::vector<int32_t> keys32(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t key = keys.dtype() == tf::DT_INT64 ? keys.flat<int64_t>()(i) : keys.flat<int32_t>()(i);
    keys32[i] = static_cast<int32_t>(key >= 0 && key < table_rows ? key : table_rows);
  }
  ForEachSum<T, A>(keys32.data(), rows.flat<T>().data(), n, d, [&](int32_t key, const std::vector<A>& run) {
    if (key >= table_rows) return;
    for (int64_t j = 0; j < d; ++j) {
      const A sum = static_cast<A>(static_cast<T>(run[j])), old = static_cast<A>(table[key * d + j]);
      table[key * d + j] = static_cast<T>(subtract ? old - sum : old + sum);
    }
  });
}

// The scatter's variable, looked up and locked, its buffer this op's alone. As TensorFlow's own sparse updates do
// (EnsureSparseVariableAccess): the variable goes to copy-on-read mode, in which reads copy its buffer instead of
// sharing it, and a buffer another tensor still holds is copied first (by `copy`), so that updating it in place
// changes no tensor but the variable.
class ScatterBase : public tf::OpKernel {
 public:
  explicit ScatterBase(tf::OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("subtract", &subtract_));
  }

  void Compute(tf::OpKernelContext* c) override {
    tf::core::RefCountPtr<tf::Var> var;
    OP_REQUIRES_OK(c, tf::LookupResource(c, tf::HandleFromInput(c, 0), &var));
    tf::mutex_lock lock(*var->mu());
    tf::Tensor* table = var->tensor();
    const tf::Tensor& keys = c->input(1);
    const tf::Tensor& rows = c->input(2);
    OP_REQUIRES(c, table->dtype() == rows.dtype(),
                tf::errors::InvalidArgument("OpbisectScatterCombine: the variable holds ",
                                            tf::DataTypeString(table->dtype()), ", the rows are ",
                                            tf::DataTypeString(rows.dtype())));
    OP_REQUIRES(c, table->dims() >= 1, tf::errors::InvalidArgument("OpbisectScatterCombine: a scalar variable"));
    const int64_t n = keys.NumElements(), table_rows = table->dim_size(0);
    const int64_t d = table_rows > 0 ? table->NumElements() / table_rows : 0;
    OP_REQUIRES(c, n < (int64_t{1} << 31), tf::errors::InvalidArgument("OpbisectScatterCombine: 2^31 keys or more"));
    OP_REQUIRES(c, table_rows < (int64_t{1} << 31),
                tf::errors::InvalidArgument("OpbisectScatterCombine: a variable of 2^31 rows or more"));
    OP_REQUIRES(c, rows.NumElements() == n * d,
                tf::errors::InvalidArgument("OpbisectScatterCombine: rows must be keys.shape + variable.shape[1:]"));
    if (n == 0 || d == 0) return;
    if (!var->copy_on_read_mode.load()) {
      var->copy_on_read_mode.store(true);
      if (!table->RefCountIsOne()) {
        tf::Tensor own;
        OP_REQUIRES_OK(c, c->allocate_temp(table->dtype(), table->shape(), &own));
        OP_REQUIRES_OK(c, Copy(c, *table, &own));
        *table = own;
      }
    }
    OP_REQUIRES_OK(c, Update(c, keys, rows, n, d, table_rows, table));
  }

 protected:
  virtual absl::Status Copy(tf::OpKernelContext* c, const tf::Tensor& from, tf::Tensor* to) = 0;
  virtual absl::Status Update(tf::OpKernelContext* c, const tf::Tensor& keys, const tf::Tensor& rows, int64_t n,
                              int64_t d, int64_t table_rows, tf::Tensor* table) = 0;
  bool subtract_ = false;
};

template <typename T>
class ScatterCpu : public ScatterBase {
 public:
  using ScatterBase::ScatterBase;

 protected:
  absl::Status Copy(tf::OpKernelContext*, const tf::Tensor& from, tf::Tensor* to) override {
    std::copy_n(from.tensor_data().data(), from.TotalBytes(), const_cast<char*>(to->tensor_data().data()));
    return absl::OkStatus();
  }

  absl::Status Update(tf::OpKernelContext*, const tf::Tensor& keys, const tf::Tensor& rows, int64_t n, int64_t d,
                      int64_t table_rows, tf::Tensor* table) override {
    AddSums<T>(keys, rows, n, d, table_rows, subtract_, table->flat<T>().data());
    return absl::OkStatus();
  }
};

template <typename Index>
static int64_t FirstOutside(const Index* keys, int64_t n, int64_t table_rows) {
  for (int64_t i = 0; i < n; ++i)
    if (keys[i] < 0 || keys[i] >= table_rows) return i;
  return -1;
}

template <typename T, typename Index>
static void AddInOrder(const Index* keys, const T* rows, int64_t n, int64_t d, int64_t lo, int64_t hi, bool subtract,
                       T* table) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = keys[i];
    if (k < lo || k >= hi) continue;
    T* row = table + k * d;
    const T* update = rows + i * d;
    if (subtract) {
      for (int64_t j = 0; j < d; ++j) row[j] = row[j] - update[j];
    } else {
      for (int64_t j = 0; j < d; ++j) row[j] = row[j] + update[j];
    }
  }
}

constexpr int64_t kSerialElements = 1 << 15;  // below this many updated elements one thread does it all

template <typename T>
class ScatterInOrderCpu : public ScatterCpu<T> {
 public:
  using ScatterCpu<T>::ScatterCpu;

 protected:
  absl::Status Update(tf::OpKernelContext* c, const tf::Tensor& keys, const tf::Tensor& rows, int64_t n, int64_t d,
                      int64_t table_rows, tf::Tensor* table) override {
    return keys.dtype() == tf::DT_INT64 ? Run(c, keys.flat<int64_t>().data(), rows, n, d, table_rows, table)
                                        : Run(c, keys.flat<int32_t>().data(), rows, n, d, table_rows, table);
  }

 private:
  template <typename Index>
  absl::Status Run(tf::OpKernelContext* c, const Index* keys, const tf::Tensor& rows, int64_t n, int64_t d,
                   int64_t table_rows, tf::Tensor* table) {
    const int64_t bad = FirstOutside(keys, n, table_rows);
    if (bad >= 0)
      return tf::errors::InvalidArgument("OpbisectScatterInOrder: indices[", bad, "] = ", keys[bad],
                                         " is not in [0, ", table_rows, ")");
    const T* src = rows.flat<T>().data();
    T* dst = table->flat<T>().data();
    const bool subtract = this->subtract_;
    auto* workers = c->device()->tensorflow_cpu_worker_threads()->workers;
    const int64_t shards = n * d < kSerialElements ? 1 : std::min<int64_t>(workers->NumThreads(), table_rows);
    if (shards <= 1) {
      AddInOrder(keys, src, n, d, 0, table_rows, subtract, dst);
      return absl::OkStatus();
    }
    // One unit a shard (a cost far above ParallelFor's threshold): each shard owns rows [lo, hi) and scans every key.
    workers->ParallelFor(shards, int64_t{1} << 30, [&](int64_t first, int64_t last) {
      for (int64_t s = first; s < last; ++s)
        AddInOrder(keys, src, n, d, s * table_rows / shards, (s + 1) * table_rows / shards, subtract, dst);
    });
    return absl::OkStatus();
  }
};

// The segment sum's checks and output (zeros): keys [n], rows [n, ...], num_segments a scalar in [0, 2^31).
absl::Status PrepareSegments(tf::OpKernelContext* c, int64_t* n, int64_t* d, int64_t* segments, tf::Tensor** out) {
  const tf::Tensor& keys = c->input(0);
  const tf::Tensor& rows = c->input(1);
  const tf::Tensor& num = c->input(2);
  if (keys.dims() != 1 || rows.dims() < 1 || rows.dim_size(0) != keys.dim_size(0))
    return tf::errors::InvalidArgument("OpbisectSegmentSum: keys must be [n] and rows [n, ...]");
  if (!tf::TensorShapeUtils::IsScalar(num.shape()))
    return tf::errors::InvalidArgument("OpbisectSegmentSum: num_segments must be a scalar");
  *segments = num.dtype() == tf::DT_INT64 ? num.scalar<int64_t>()() : num.scalar<int32_t>()();
  if (*segments < 0 || *segments >= (int64_t{1} << 31))
    return tf::errors::InvalidArgument("OpbisectSegmentSum: num_segments must be in [0, 2^31), not ", *segments);
  *n = keys.dim_size(0);
  if (*n >= (int64_t{1} << 31)) return tf::errors::InvalidArgument("OpbisectSegmentSum: 2^31 keys or more");
  tf::TensorShape shape = rows.shape();
  shape.set_dim(0, *segments);
  *d = 1;
  for (int i = 1; i < rows.dims(); ++i) *d *= rows.dim_size(i);
  return c->allocate_output(0, shape, out);
}

template <typename T>
class SegmentSumCpu : public tf::OpKernel {
 public:
  explicit SegmentSumCpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    int64_t n, d, segments;
    tf::Tensor* out;
    OP_REQUIRES_OK(c, PrepareSegments(c, &n, &d, &segments, &out));
    T* table = out->flat<T>().data();
    std::fill(table, table + segments * d, T(0));
    if (n > 0 && d > 0 && segments > 0) AddSums<T>(c->input(0), c->input(1), n, d, segments, false, table);
  }
};

#define OPBISECT_CPU(T) \
  REGISTER_KERNEL_BUILDER(Name("OpbisectCombine").Device(tf::DEVICE_CPU).TypeConstraint<T>("T"), CombineCpu<T>)
OPBISECT_CPU(Eigen::half);
OPBISECT_CPU(Eigen::bfloat16);
OPBISECT_CPU(float);
OPBISECT_CPU(double);

#define OPBISECT_SCATTER_CPU(T)                                                                               \
  REGISTER_KERNEL_BUILDER(Name("OpbisectScatterCombine").Device(tf::DEVICE_CPU).TypeConstraint<T>("T"), \
                          ScatterCpu<T>)
OPBISECT_SCATTER_CPU(Eigen::half);
OPBISECT_SCATTER_CPU(Eigen::bfloat16);
OPBISECT_SCATTER_CPU(float);
OPBISECT_SCATTER_CPU(double);

#define OPBISECT_IN_ORDER_CPU(T)                                                                              \
  REGISTER_KERNEL_BUILDER(Name("OpbisectScatterInOrder").Device(tf::DEVICE_CPU).TypeConstraint<T>("T"), \
                          ScatterInOrderCpu<T>)
OPBISECT_IN_ORDER_CPU(Eigen::half);
OPBISECT_IN_ORDER_CPU(Eigen::bfloat16);
OPBISECT_IN_ORDER_CPU(float);
OPBISECT_IN_ORDER_CPU(double);

#define OPBISECT_SEGMENTS_CPU(T)                                                                           \
  REGISTER_KERNEL_BUILDER(Name("OpbisectSegmentSum").Device(tf::DEVICE_CPU).TypeConstraint<T>("T"), \
                          SegmentSumCpu<T>)
OPBISECT_SEGMENTS_CPU(Eigen::half);
OPBISECT_SEGMENTS_CPU(Eigen::bfloat16);
OPBISECT_SEGMENTS_CPU(float);
OPBISECT_SEGMENTS_CPU(double);

#ifdef OPBISECT_WITH_CUDA
template <typename T> constexpr int kType = kCombineF32;
template <> constexpr int kType<double> = kCombineF64;
template <> constexpr int kType<Eigen::half> = kCombineF16;
template <> constexpr int kType<Eigen::bfloat16> = kCombineBF16;

// Device scratch for both GPU kernels (their stream and CUDA status: gpu_op.h).
absl::Status GpuScratch(tf::OpKernelContext* c, size_t bytes, tf::Tensor* scratch) {
  return c->allocate_temp(tf::DT_INT8, tf::TensorShape({static_cast<int64_t>(bytes)}), scratch);
}

// The ordering's device scratch and the graph of its sort, kept from call to call while the count of keys and the
// stream stay the same (a step calls with the same sizes each time), so that the graph replays over the same
// buffers. Run holds the lock across the whole launch: two calls at once must not share the buffers' contents,
// and on one stream one call's work all runs before the next one's.
class OrderScratch {
 public:
  ~OrderScratch() { FreeSortGraph(graph_); }

  // launch(order, order_bytes, graph)
  template <typename Launch>
  absl::Status Run(tf::OpKernelContext* c, int64_t n, void* stream, Launch launch) {
    tf::mutex_lock lock(mu_);
    if (n != n_ || stream != stream_) {
      n_ = -1;
      FreeSortGraph(graph_);
      graph_ = NewSortGraph();
      bytes_ = OrderScratchBytes(n);  // asks CUB: once per size, not once per call
      TF_RETURN_IF_ERROR(GpuScratch(c, bytes_, &scratch_));
      n_ = n;
      stream_ = stream;
    }
    return launch(scratch_.flat<int8_t>().data(), bytes_, graph_);
  }

 private:
  tf::mutex mu_;
  tf::Tensor scratch_;
  int64_t n_ = -1;
  void* stream_ = nullptr;
  size_t bytes_ = 0;
  SortGraph* graph_ = nullptr;
};

// The keys and rows whose sums are added: keys [n] (int32 or int64), rows [n, d].
struct Rows {
  const tf::Tensor& keys;
  const tf::Tensor& rows;
  int64_t n, d;
};

// table[k] += (or -=) each distinct key's sum on the GPU (the scatter's kernel), with the kernel's ordering scratch:
// the scatter's update of a variable, and the segment sum's over zeros. n >= 1 and d >= 1.
template <typename T>
absl::Status AddSumsGpu(tf::OpKernelContext* c, const char* op, OrderScratch* order, const Rows& in, bool subtract,
                        int64_t table_rows, void* table) {
  void* stream;
  TF_RETURN_IF_ERROR(GpuStream(c, op, &stream));
  tf::Tensor part;
  TF_RETURN_IF_ERROR(GpuScratch(c, PartScratchBytes(in.n, in.d, kType<T>), &part));
  return order->Run(c, in.n, stream, [&](void* scratch, size_t bytes, SortGraph* graph) {
    return CudaStatus(op, LaunchScatterCombine(kType<T>, subtract, in.keys.tensor_data().data(),
                                               in.keys.dtype() == tf::DT_INT64, in.rows.tensor_data().data(), in.n,
                                               in.d, table_rows, table, scratch, bytes, part.flat<int8_t>().data(),
                                               graph, stream));
  });
}

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
    void* stream;
    OP_REQUIRES_OK(c, GpuStream(c, "OpbisectCombine", &stream));
    tf::Tensor part;
    OP_REQUIRES_OK(c, GpuScratch(c, PartScratchBytes(n, d, kType<T>), &part));
    OP_REQUIRES_OK(c, order_.Run(c, n, stream, [&](void* order, size_t bytes, SortGraph* graph) {
      return CudaStatus("OpbisectCombine", LaunchCombine(
          kType<T>, c->input(0).flat<int32_t>().data(), c->input(1).tensor_data().data(), n, d, pad,
          distinct->flat<int32_t>().data(), const_cast<char*>(sums->tensor_data().data()), order, bytes,
          part.flat<int8_t>().data(), graph, stream));
    }));
  }

 private:
  OrderScratch order_;
};

#define OPBISECT_GPU(T)                                                                                  \
  REGISTER_KERNEL_BUILDER(                                                                               \
      Name("OpbisectCombine").Device(tf::DEVICE_GPU).TypeConstraint<T>("T").HostMemory("pad"), \
      CombineGpu<T>)
OPBISECT_GPU(Eigen::half);
OPBISECT_GPU(Eigen::bfloat16);
OPBISECT_GPU(float);
OPBISECT_GPU(double);

template <typename T>
class ScatterGpu : public ScatterBase {
 public:
  using ScatterBase::ScatterBase;

 protected:
  absl::Status Copy(tf::OpKernelContext* c, const tf::Tensor& from, tf::Tensor* to) override {
    void* stream;
    TF_RETURN_IF_ERROR(GpuStream(c, kScatterOp, &stream));
    return CudaStatus(kScatterOp, LaunchCopy(const_cast<char*>(to->tensor_data().data()), from.tensor_data().data(),
                                             from.TotalBytes(), stream));
  }

  absl::Status Update(tf::OpKernelContext* c, const tf::Tensor& keys, const tf::Tensor& rows, int64_t n, int64_t d,
                      int64_t table_rows, tf::Tensor* table) override {
    return AddSumsGpu<T>(c, kScatterOp, &order_, {keys, rows, n, d}, subtract_, table_rows,
                         const_cast<char*>(table->tensor_data().data()));
  }

 private:
  static constexpr const char* kScatterOp = "OpbisectScatterCombine";
  OrderScratch order_;
};

#define OPBISECT_SCATTER_GPU(T)                                                                                 \
  REGISTER_KERNEL_BUILDER(                                                                                      \
      Name("OpbisectScatterCombine").Device(tf::DEVICE_GPU).HostMemory("resource").TypeConstraint<T>("T"), \
      ScatterGpu<T>)
OPBISECT_SCATTER_GPU(Eigen::half);
OPBISECT_SCATTER_GPU(Eigen::bfloat16);
OPBISECT_SCATTER_GPU(float);
OPBISECT_SCATTER_GPU(double);

template <typename T>
class SegmentSumGpu : public tf::OpKernel {
 public:
  explicit SegmentSumGpu(tf::OpKernelConstruction* c) : OpKernel(c) {}
  void Compute(tf::OpKernelContext* c) override {
    static constexpr const char* kOp = "OpbisectSegmentSum";
    int64_t n, d, segments;
    tf::Tensor* out;
    OP_REQUIRES_OK(c, PrepareSegments(c, &n, &d, &segments, &out));
    void* stream;
    OP_REQUIRES_OK(c, GpuStream(c, kOp, &stream));
    void* table = const_cast<char*>(out->tensor_data().data());
    OP_REQUIRES_OK(c, CudaStatus(kOp, LaunchZero(table, out->TotalBytes(), stream)));
    if (n == 0 || d == 0 || segments == 0) return;
    OP_REQUIRES_OK(c, AddSumsGpu<T>(c, kOp, &order_, {c->input(0), c->input(1), n, d}, false, segments, table));
  }

 private:
  OrderScratch order_;
};

#define OPBISECT_SEGMENTS_GPU(T)                                                                                  \
  REGISTER_KERNEL_BUILDER(                                                                                        \
      Name("OpbisectSegmentSum").Device(tf::DEVICE_GPU).HostMemory("num_segments").TypeConstraint<T>("T"), \
      SegmentSumGpu<T>)
OPBISECT_SEGMENTS_GPU(Eigen::half);
OPBISECT_SEGMENTS_GPU(Eigen::bfloat16);
OPBISECT_SEGMENTS_GPU(float);
OPBISECT_SEGMENTS_GPU(double);
#endif

}  // namespace
}  // namespace opbisect
