// A second CUDA stream per device for the fused fingerprint, so that its reads overlap the step's kernels instead
// of running in series with them on the step's stream (benchmarks/README.md, "Where capture's time goes": the step
// keeps its GPU busy 61% of the time, and reading every tapped byte once in series alone costs 1.13x).
//
// The contract that keeps it safe (side_stream.cu does the CUDA half, fingerprint_op.cc the tensors' half):
// 1. The side stream starts a digest only after the step's stream has done everything enqueued before it
//    (`SideAfter`), so every input is written and the output buffer's former user is done.
// 2. The op holds a reference to each input until an event recorded after its reads has completed (polled, never
//    waited on, at the next digest op), so no buffer is handed to another op while the side stream reads it.
// 3. The step's stream waits for the side stream (`MainAfterSide`) before anything reads the digests; then the
//    remaining references may go, since every later user of a freed buffer is ordered after the step's stream.
// Plain C++ signatures (handles as void*), so the op's .cc compiles without CUDA headers.
#pragma once

namespace opbisect {

// The side stream of the device that owns `main` (created on first use, at the lowest priority, so the step's own
// kernels come first), made to wait for all work enqueued on `main` so far. Returns a CUDA error code.
int SideAfter(void* main, void** side);

// An event recorded on `stream` now (returned in *event). Returns a CUDA error code.
int RecordOn(void* stream, void** event);

// 1: the event's work is done; 0: not yet; negative: a CUDA error code, negated.
int EventDone(void* event);

// Releases an event (recorded or done).
void DropEvent(void* event);

// `main` waits for all work enqueued on the side stream of its device so far; *side: that stream (nullptr, and no
// wait, when none was made). Returns a CUDA error code.
int MainAfterSide(void* main, void** side);

}  // namespace opbisect
