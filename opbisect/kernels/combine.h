// The deterministic combine (`OpbisectCombine`): rows[n, ...] with int32 keys[n] -> one row per distinct key,
// the sum of that key's rows, with the same adds in the same order on every run, on a CPU and on a GPU alike:
//   1. the positions stably sorted by key (equal keys keep their input order);
//   2. the sorted positions cut into segments at each new key and at every kCombineChunk-th position, and each
//      segment's rows added in order, starting from zero (in float for the half types);
//   3. each key's segment sums added in order, starting from zero.
// Outputs: distinct[n] (the distinct keys, ascending, then `pad`) and sums[n, ...] (their sums, then zeros).
// Both sizes are the input's, so nothing waits for the count of distinct keys on the host. The chunks of step 2
// bound the rows one GPU thread adds: a hot key's thousands of rows are split among many threads, and its sum
// adds at most n / kCombineChunk segment sums.
#pragma once
#include <cstddef>
#include <cstdint>

namespace opbisect {

constexpr int64_t kCombineChunk = 128;

enum CombineType : int { kCombineF32 = 0, kCombineF64 = 1, kCombineF16 = 2, kCombineBF16 = 3 };

// A call's device scratch, in two parts: the ordering's (sorted keys and positions, the runs, CUB's share), which a
// kernel may keep from call to call (SortGraph), and the segment sums' (`part`), for n keys of rows of d elements.
size_t OrderScratchBytes(int64_t n);
size_t PartScratchBytes(int64_t n, int64_t d, int type);

// A CUDA graph of the sort (and the combine's run numbering), captured on the second call in a row with the same
// sizes and ordering scratch and replayed from then on: one launch where CUB's sort enqueues about ten kernels and
// memsets, host time on a step that waits on the host. Optional (nullptr: every call enqueues directly); not
// thread-safe: the kernel that owns one holds a lock across each call, whose work is all on one stream.
struct SortGraph;
SortGraph* NewSortGraph();
void FreeSortGraph(SortGraph* graph);

// Enqueues the combine on `stream` (a cudaStream_t); n >= 1 and n < 2^31; `order` holds the order_bytes that
// OrderScratchBytes gave (the launch does not ask CUB for its share again), `part` PartScratchBytes. Returns a CUDA
// error code (0: none).
int LaunchCombine(int type, const int32_t* keys, const void* rows, int64_t n, int64_t d, int32_t pad,
                  int32_t* distinct, void* sums, void* order, size_t order_bytes, void* part, SortGraph* graph,
                  void* stream);

// The deterministic scatter (`OpbisectScatterCombine`): the same sums, added into a variable's rows in place,
//   table[k] = table[k] + sum(k)   (or - sum(k) when `subtract`), each in the table's type,
// for every distinct key k in [0, table_rows); other keys are dropped, as TensorFlow's GPU scatter drops an index
// out of range. The sums are the combine's, with each dropped key read as table_rows (so they sort last). Each row
// of the table is written by one thread, once: no atomics, and nothing in between (the combine's sums are never
// stored, nor gathered, added and written back by three more kernels). `keys` are int32, or int64 when keys64.
int LaunchScatterCombine(int type, bool subtract, const void* keys, bool keys64, const void* rows, int64_t n,
                         int64_t d, int64_t table_rows, void* table, void* order, size_t order_bytes, void* part,
                         SortGraph* graph, void* stream);

// A device-to-device copy on `stream` (the variable's buffer, when another tensor still holds it).
int LaunchCopy(void* to, const void* from, size_t bytes, void* stream);

// Zeros on `stream` (the segment sum's output, before the scatter's sums are added into it).
int LaunchZero(void* to, size_t bytes, void* stream);

}  // namespace opbisect
