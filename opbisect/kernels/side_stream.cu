// The side streams of side_stream.h: one per device, created on first use and kept for the process's life.
#include <cuda_runtime.h>

#include <mutex>

#include "side_stream.h"

namespace opbisect {

namespace {

constexpr int kMaxDevices = 64;
std::mutex mu;
cudaStream_t sides[kMaxDevices] = {};

// Runs `f` with `device` current for the runtime API (streams and events belong to the device current when they
// are made); the thread's device is restored, since TensorFlow's threads serve every GPU.
template <typename F>
cudaError_t OnDevice(int device, F f) {
  int before = 0;
  cudaError_t err = cudaGetDevice(&before);
  if (err != cudaSuccess) return err;
  if (before != device && (err = cudaSetDevice(device)) != cudaSuccess) return err;
  err = f();
  if (before != device) {
    const cudaError_t back = cudaSetDevice(before);
    if (err == cudaSuccess) err = back;
  }
  return err;
}

cudaError_t DeviceOf(cudaStream_t stream, int* device) {
  const cudaError_t err = cudaStreamGetDevice(stream, device);
  if (err == cudaSuccess && (*device < 0 || *device >= kMaxDevices)) return cudaErrorInvalidDevice;
  return err;
}

// The side stream of `device`, made now if it is the first ask.
cudaError_t SideOf(int device, cudaStream_t* side) {
  std::lock_guard<std::mutex> lock(mu);
  if (sides[device] == nullptr) {
    cudaError_t err = OnDevice(device, [&] {
      int least = 0, greatest = 0;  // CUDA's "greatest" priority is the smallest number
      cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
      if (e != cudaSuccess) return e;
      return cudaStreamCreateWithPriority(&sides[device], cudaStreamNonBlocking, least);
    });
    if (err != cudaSuccess) return err;
  }
  *side = sides[device];
  return cudaSuccess;
}

// `waiter` waits for the work enqueued on `done` so far.
cudaError_t Wait(int device, cudaStream_t waiter, cudaStream_t done) {
  return OnDevice(device, [&] {
    cudaEvent_t event;
    cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (err != cudaSuccess) return err;
    err = cudaEventRecord(event, done);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(waiter, event, 0);
    cudaEventDestroy(event);  // allowed while the wait is pending: it is released once the event completes
    return err;
  });
}

}  // namespace

int SideAfter(void* main, void** side) {
  cudaStream_t step = static_cast<cudaStream_t>(main), digests = nullptr;
  int device = 0;
  cudaError_t err = DeviceOf(step, &device);
  if (err == cudaSuccess) err = SideOf(device, &digests);
  if (err == cudaSuccess) err = Wait(device, digests, step);
  *side = digests;
  return static_cast<int>(err);
}

int RecordOn(void* stream, void** event) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  int device = 0;
  cudaError_t err = DeviceOf(s, &device);
  if (err != cudaSuccess) return static_cast<int>(err);
  cudaEvent_t made = nullptr;
  err = OnDevice(device, [&] {
    cudaError_t e = cudaEventCreateWithFlags(&made, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(made, s);
    return e;
  });
  *event = made;
  return static_cast<int>(err);
}

int EventDone(void* event) {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaSuccess) return 1;
  if (err == cudaErrorNotReady) return 0;
  return -static_cast<int>(err);
}

void DropEvent(void* event) {
  if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

int MainAfterSide(void* main, void** side) {
  cudaStream_t step = static_cast<cudaStream_t>(main), digests = nullptr;
  int device = 0;
  *side = nullptr;
  cudaError_t err = DeviceOf(step, &device);
  if (err != cudaSuccess) return static_cast<int>(err);
  {
    std::lock_guard<std::mutex> lock(mu);
    digests = sides[device];
  }
  *side = digests;
  return digests == nullptr ? 0 : static_cast<int>(Wait(device, step, digests));
}

}  // namespace opbisect
