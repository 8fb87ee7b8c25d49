// What opbisect's GPU kernels take from TensorFlow: the op's CUDA stream, and a CUDA error code as a status.
#pragma once
#ifdef OPBISECT_WITH_CUDA
#include "tensorflow/core/framework/op_kernel.h"
#include "xla/stream_executor/stream.h"

namespace opbisect {

inline absl::Status GpuStream(::tensorflow::OpKernelContext* c, const char* op, void** stream) {
  auto* s = c->op_device_context()->stream();
  if (s == nullptr) return ::tensorflow::errors::Internal(op, ": no GPU stream");
  *stream = s->platform_specific_handle().stream;
  return absl::OkStatus();
}

inline absl::Status CudaStatus(const char* op, int err) {
  return err == 0 ? absl::OkStatus() : ::tensorflow::errors::Internal(op, ": CUDA error ", err);
}

}  // namespace opbisect
#endif
