"""Every patch against the plain op and TensorFlow's own deterministic form, over the shapes real models have, with
each op's memory-bandwidth floor beside it (issue 42).

    python benchmarks/patch_sweep.py --device gpu --json sweep.json --plot sweep.png   # on the H200
    python benchmarks/patch_sweep.py --device cpu --scale 64                           # here: shapes / 64
    python benchmarks/patch_sweep.py --replot sweep.json --plot sweep.png              # a run's table and plot again

One process. For each case (op, shape, dtype): the raw op (plain) and opbisect's patch as the rewrite builds it
(patched; beside it, where the patch runs on opbisect's own kernels, on a GPU and the CPU's scatter, its form on
TensorFlow's ops alone, which is what runs where the kernels cannot be built), each one tf.function that applies the
op to --copies input sets of the case (distinct tensors, so no pass merges them), timed as the median of --repeats
samples (at most a second of them) of 10 calls back to back, each sample waited for (so dispatch overlaps the
device, as in a step), divided by the copies. One op a call times the call: the H200 sweeps with one op a call
(--copies 1) gave BiasAddGrad 0.21-0.25 ms at floors from 0.003 to 0.066 ms, times that hardly follow the op's work;
in a step the op is one node of many in one graph, as in the copies. Then, after
tf.config.experimental.enable_op_determinism(), TensorFlow's own deterministic form (tf-det: the op's own kernel
under the switch, or tf.nn's composition for the cross-entropy, whose kernel raises under it). floor: the bytes the
op must read and write once / the device's copy bandwidth, measured here (a negation of 1 GiB: read + write).
"runs": distinct results in 5 calls of the patched form (1: the same bits).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from timing import timed  # noqa: E402 - benchmarks/, the script's folder, is on sys.path

CALLS = 10  # calls per timed sample
BUDGET_S = 1.0  # seconds of samples per variant, at most (at least 3 samples): the first H200 run, 20 samples
# each, ran past its 10-minute call in the half-precision cases whose plain kernel takes 100 ms
# The patches with a form on opbisect's own GPU kernels; their form on TensorFlow's ops alone is timed beside it.
OWN_KERNEL_OPS = ("SparseSoftmaxCrossEntropyWithLogits", "BiasAddGrad", "UnsortedSegmentSum", "SegmentSum",
                  "ResourceScatterAdd")
CPU_OWN_KERNEL_OPS = ("ResourceScatterAdd",)  # on a CPU: the scatter in index order (OpbisectScatterInOrder)


@dataclasses.dataclass(frozen=True)
class Case:
    op: str
    shape: tuple  # the case's sizes, as `make` reads them
    words: str  # what the shape is, for the table
    dtype: str = "float32"
    attrs: tuple = ()  # (name, value) pairs: the node's attributes the patch reads


def xent_cases():
    shapes = [((65536, 1024), "64k tokens x 1k classes"), ((8192, 8192), "LM head 8k (32 x 256 tokens)"),
              ((4096, 32768), "LM head 32k"), ((16384, 32768), "LM head 32k, 16k tokens"),
              ((2048, 131072), "LM head 128k"), ((512, 262144), "LM head 256k, 512 tokens")]
    return [Case("SparseSoftmaxCrossEntropyWithLogits", s, w, d) for s, w in shapes
            for d in ("float32", "float16", "bfloat16")]


def bias_cases():
    shapes = [((8192, 8192), "NHWC", "LM head bias"), ((4096, 768), "NHWC", "BERT-base dense"),
              ((65536, 1024), "NHWC", "64k tokens x 1k"), ((16384, 4096), "NHWC", "BERT-large FFN, 16k tokens"),
              ((32, 56, 56, 256), "NHWC", "ResNet stage 1"), ((32, 7, 7, 2048), "NHWC", "ResNet stage 4"),
              ((32, 256, 56, 56), "NCHW", "ResNet stage 1, NCHW")]
    return [Case("BiasAddGrad", s, w, d, (("data_format", f),)) for s, f, w in shapes
            for d in ("float32", "float16", "bfloat16")]


def segment_cases():
    shapes = [((8192, 256, 8192), "embedding 8k x 256, 8k tokens"), ((4096, 768, 30522), "BERT word embedding"),
              ((65536, 1024, 32768), "64k rows x 1k into 32k"), ((1048576, 64, 16), "1M rows into 16 segments"),
              ((262144, 128, 1000000), "256k rows into 1M segments")]
    cases = [Case(op, s, w, d) for s, w in shapes for d in ("float32", "bfloat16")
             for op in ("UnsortedSegmentSum", "SegmentSum")]
    return cases


def scatter_cases():
    return [Case("ResourceScatterAdd", (32768, 512, 8192), "32k x 512 table, 8k updates"),
            Case("ResourceScatterAdd", (1048576, 64, 65536), "1M x 64 table, 64k updates"),
            Case("TensorScatterAdd", (32768, 512, 8192), "32k x 512 tensor, 8k updates"),
            Case("ResizeBilinearGrad", (32, 112, 112, 64, 56), "112 -> 56, 64 channels",
                 attrs=(("align_corners", False), ("half_pixel_centers", True))),
            Case("ResizeBilinearGrad", (8, 224, 224, 3, 112), "224 -> 112, 3 channels",
                 attrs=(("align_corners", False), ("half_pixel_centers", True)))]


def scaled(case: Case, scale: int) -> Case:
    """The case at 1/scale of its largest sizes (a CPU's smoke run), channel counts kept at least 1."""
    if scale == 1:
        return case
    shape = list(case.shape)
    shape[0] = max(1, shape[0] // scale)
    return dataclasses.replace(case, shape=tuple(shape))


def make(tf, case: Case):
    """The op's inputs, made on the device (random, seeded), and the bytes the op must move at least."""
    dtype = tf.as_dtype(case.dtype)
    size = dtype.size

    def normal(shape, seed=1):
        return tf.cast(tf.random.stateless_normal(shape, (seed, 0)), dtype)

    def ids(n, top, seed=2):
        return tf.random.stateless_uniform([n], (seed, 0), 0, top, dtype=tf.int32)

    if case.op == "SparseSoftmaxCrossEntropyWithLogits":
        n, c = case.shape
        return (normal([n, c]) * 4, ids(n, c)), 2 * n * c * size
    if case.op == "BiasAddGrad":
        return (normal(list(case.shape)),), _count(case.shape) * size
    if case.op in ("UnsortedSegmentSum", "SegmentSum"):
        n, d, segments = case.shape
        keys = ids(n, segments)
        keys = tf.sort(keys) if case.op == "SegmentSum" else keys
        extra = (segments,) if case.op == "UnsortedSegmentSum" else ()
        return (normal([n, d]), keys, *extra), (n + segments) * d * size + n * 4  # every output row is written
    if case.op == "ResourceScatterAdd":
        rows, d, n = case.shape
        table = tf.Variable(normal([rows, d]))
        return (table, ids(n, rows // 8), normal([n, d])), 3 * n * d * size  # duplicates: 8 per row on average
    if case.op == "TensorScatterAdd":
        rows, d, n = case.shape
        return (normal([rows, d]), ids(n, rows // 8)[:, None], normal([n, d])), (2 * rows + n) * d * size
    batch, high, wide, channels, small = case.shape
    grads = normal([batch, high, wide, channels])
    moved = (_count(grads.shape) + batch * small * small * channels) * size
    return (grads, normal([batch, small, small, channels])), moved


def _count(shape) -> int:
    total = 1
    for s in shape:
        total *= int(s)
    return total


def plain_call(tf, case: Case, inputs):
    attrs = dict(case.attrs)
    op = getattr(tf.raw_ops, case.op)
    if case.op == "SparseSoftmaxCrossEntropyWithLogits":
        return lambda: op(features=inputs[0], labels=inputs[1])
    if case.op == "BiasAddGrad":
        return lambda: op(out_backprop=inputs[0], data_format=attrs["data_format"])
    if case.op == "UnsortedSegmentSum":
        return lambda: op(data=inputs[0], segment_ids=inputs[1], num_segments=inputs[2])
    if case.op == "SegmentSum":
        return lambda: op(data=inputs[0], segment_ids=inputs[1])
    if case.op == "ResourceScatterAdd":
        return lambda: op(resource=inputs[0].handle, indices=inputs[1], updates=inputs[2]) and None
    if case.op == "TensorScatterAdd":
        return lambda: op(tensor=inputs[0], indices=inputs[1], updates=inputs[2])
    return lambda: op(grads=inputs[0], original_image=inputs[1], **attrs)


def patched_call(tf, case: Case, inputs, on_cpu: bool, own_kernels: bool = True):
    from opbisect.patches import PATCHES, PatchContext

    attrs = dict(case.attrs, T=tf.as_dtype(case.dtype))
    ctx = PatchContext(op_type=case.op, attrs=attrs, xla=False, on_cpu=on_cpu, own_kernels=own_kernels)
    build = PATCHES[case.op].build
    args = [inputs[0].handle if case.op == "ResourceScatterAdd" else inputs[0], *inputs[1:]]
    return lambda: build(ctx, *args)


def tf_det_call(tf, case: Case, inputs):
    """TensorFlow's own deterministic form, called after enable_op_determinism()."""
    if case.op != "SparseSoftmaxCrossEntropyWithLogits":
        return plain_call(tf, case, inputs)

    def composed():  # what tf.nn builds under the switch, and its gradient
        with tf.GradientTape() as tape:
            tape.watch(inputs[0])
            loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=inputs[1], logits=inputs[0])
        return loss, tape.gradient(loss, inputs[0])
    return composed


def timing(tf, fn, repeats: int):
    """Median seconds of one call, and how many distinct results 5 calls gave (None: it writes a variable)."""
    compiled = tf.function(fn)

    def sample():
        for _ in range(CALLS):
            out = compiled()
        return out

    sync = tf.test.experimental.sync_devices
    once = timed(sample, 1, lambda _: sync())
    repeats = max(3, min(repeats, int(BUDGET_S / once)))  # the slowest cases (100 ms a call): fewer samples
    seconds = timed(sample, repeats, lambda _: sync(), warmup=0) / CALLS
    outs = [compiled() for _ in range(5)]
    flat = [[t for t in tf.nest.flatten(o) if t is not None] for o in outs]
    distinct = len({b"".join(t.numpy().tobytes() for t in f) for f in flat}) if flat[0] else None
    return seconds, distinct


def copy_bandwidth(tf, gib: float) -> float:
    """Bytes per second of a read and a write of `gib` GiB (a negation), the floor's yardstick."""
    x = tf.random.stateless_normal([int(gib * 2 ** 28)], (0, 0))
    seconds, _ = timing(tf, lambda: tf.negative(x), 10)
    return 2 * x.shape[0] * 4 / seconds


def save(rows, args, tf) -> None:
    """The JSON so far: written after every case, so that a run cut short keeps what it measured. A row a line:
    indented, one H100 sweep took 1,127 lines of the reports' quarter of the repository (tests/test_layout.py)."""
    if args.json:
        Path(args.json).write_text(rows_json(tf.__version__, rows))


def rows_json(version: str, rows) -> str:
    lines = ",\n".join(json.dumps(row) for row in rows)
    return f'{{"tensorflow": {json.dumps(version)}, "rows": [\n{lines}]}}\n'


def copied(calls):
    """One function of the copies: `calls` (one per input set), each result kept."""
    return lambda: [call() for call in calls]


def per_op_ms(tf, case: Case, sets, form, repeats: int):
    """(ms of one op, distinct results in 5 calls): form(tf, case, inputs) over every input set in one call."""
    seconds, distinct = timing(tf, copied([form(tf, case, inputs) for inputs in sets]), repeats)
    return seconds / len(sets) * 1e3, distinct


# The copies' bytes moved, at most: the largest cases (4 GiB) take one, which is long enough. A CPU machine holds
# every copy's inputs, outputs and the patch's buffers in its memory: 8 copies of the 1M-segment case (512 MB out
# each) took 24 GB on the 23 GB CPU machine, which killed the run.
COPIES_BYTES = {"gpu": 4 << 30, "cpu": 1 << 30}


def copies(args, moved: int, on_cpu: bool) -> int:
    return max(1, min(args.copies, COPIES_BYTES["cpu" if on_cpu else "gpu"] // max(moved, 1)))


PROFILED_CALLS = 5
EXECUTOR_EVENTS = ("Executor", "Memory", "Threadpool")  # a CPU profile's events around the ops' kernels


def profiled(tf, case: Case, sets, on_cpu: bool) -> dict:
    """Device time and launches a call of one op, plain and patched, from TensorFlow's profiler: what a row over the
    goal spends (benchmarks/device_profile.py); the kernels that grew are printed."""
    from device_profile import compared, kernel_times

    forms = {"plain": plain_call, "patched": lambda t, c, i: patched_call(t, c, i, on_cpu)}
    tables = {name: kernel_times(tf.function(copied([form(tf, case, inputs) for inputs in sets])),
                                 calls=PROFILED_CALLS) for name, form in forms.items()}
    if on_cpu:  # the host's rows: the ops' kernels, not the executor's own events that contain them
        tables = {name: t[~t["kernel"].str.startswith(EXECUTOR_EVENTS)] for name, t in tables.items()}
    print(compared(tables, top=6), flush=True)
    return {name: {"device_us": float(t["us_per_call"].sum()) / len(sets),
                   "launches": float(t["calls"].sum()) / PROFILED_CALLS / len(sets)} for name, t in tables.items()}


def run(tf, cases, args, on_cpu: bool) -> list[dict]:
    bandwidth = copy_bandwidth(tf, 1.0 if not on_cpu else 1 / 16)
    print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s", flush=True)
    rows = []
    for case in cases:
        first, moved = make(tf, case)
        sets = [first] + [make(tf, case)[0] for _ in range(copies(args, moved, on_cpu) - 1)]
        plain, plain_runs = per_op_ms(tf, case, sets, plain_call, args.repeats)
        patched, runs = per_op_ms(tf, case, sets, lambda t, c, i: patched_call(t, c, i, on_cpu), args.repeats)
        tf_ops = None
        if case.op in (CPU_OWN_KERNEL_OPS if on_cpu else OWN_KERNEL_OPS) and not args.plain_and_patch:
            tf_ops = per_op_ms(tf, case, sets, lambda t, c, i: patched_call(t, c, i, on_cpu, own_kernels=False),
                               args.repeats)[0]
        rows.append(dict(op=case.op, words=case.words, shape=list(case.shape), dtype=case.dtype, copies=len(sets),
                         plain_ms=plain, patched_ms=patched, ratio=patched / plain, tf_ops_ms=tf_ops,
                         floor_ms=moved / bandwidth * 1e3, plain_runs=plain_runs, patched_runs=runs))
        print(_line(rows[-1]), flush=True)
        if args.profile_over and rows[-1]["ratio"] > args.profile_over:
            rows[-1]["profile"] = profiled(tf, case, sets, on_cpu)
        save(rows, args, tf)
        del first, sets
    if args.plain_and_patch:
        return rows
    tf.config.experimental.enable_op_determinism()  # the switch, last: it holds for the rest of the process
    for row, case in zip(rows, cases):
        sets = [make(tf, case)[0] for _ in range(row["copies"])]
        try:
            row["tf_det_ms"] = per_op_ms(tf, case, sets, tf_det_call, args.repeats)[0]
        except Exception as exc:  # noqa: BLE001 - the switch raises for some ops: that is the measurement
            row["tf_det_ms"], row["tf_det_error"] = None, type(exc).__name__
        save(rows, args, tf)
    return rows


def _line(row) -> str:
    tf_ops = f"  TF ops only {row['tf_ops_ms']:8.3f} ms" if row["tf_ops_ms"] else ""
    return (f"{row['op']:38s} {row['words']:32s} {row['dtype']:9s} plain {row['plain_ms']:8.3f} ms  patched "
            f"{row['patched_ms']:8.3f} ms  {row['ratio']:5.2f}x{tf_ops}  floor {row['floor_ms']:7.3f} ms  runs "
            f"{row['plain_runs']}->{row['patched_runs']}")


def table(rows) -> str:
    lines = ["| op | shape | dtype | plain ms | patched ms | patched / plain | TF ops only / plain | tf-det / plain "
             "| floor ms | patched / floor | runs plain -> patched |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    profiles = any("profile" in r for r in rows)
    if profiles:  # a column of the device's own time a call for the rows profiled (--profile-over)
        lines[0] += " device us, launches: plain -> patched |"
        lines[1] += " --- |"
    for r in rows:
        det = f"{r['tf_det_ms'] / r['plain_ms']:.2f}x" if r.get("tf_det_ms") else r.get("tf_det_error", "-")
        tf_ops = f"{r['tf_ops_ms'] / r['plain_ms']:.2f}x" if r.get("tf_ops_ms") else "-"
        lines.append(f"| {r['op']} | {r['words']} | {r['dtype']} | {r['plain_ms']:.3f} | {r['patched_ms']:.3f} | "
                     f"{r['ratio']:.2f}x | {tf_ops} | {det} | {r['floor_ms']:.3f} | "
                     f"{r['patched_ms'] / r['floor_ms']:.1f}x | {r['plain_runs']} -> {r['patched_runs']} |"
                     + (f" {_profile_cell(r.get('profile'))} |" if profiles else ""))
    return "\n".join(lines)


def _profile_cell(profile) -> str:
    if not profile:
        return "-"
    plain, patched = profile["plain"], profile["patched"]
    return (f"{plain['device_us']:.1f}, {plain['launches']:.0f} -> {patched['device_us']:.1f}, "
            f"{patched['launches']:.0f}")


def plot(rows, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16",
             "SparseSoftmaxCrossEntropyWithLogits": "SparseXent"}
    labels = [f"{short.get(r['op'], r['op'])[:18]} {r['words'][:28]} {short[r['dtype']]}" for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.22 * len(rows) + 1.5))
    ys = range(len(rows))
    ax.barh(ys, [r["ratio"] for r in rows], color="tab:blue", label="patched / plain")
    ax.scatter([r["floor_ms"] / r["plain_ms"] for r in rows], ys, color="black", marker="|", s=60,
               label="floor / plain", zorder=3)
    ax.axvline(1.05, color="tab:red", linestyle="--", label="goal 1.05x")
    ax.set_yticks(list(ys), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("time / the plain op's (log)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    parser.add_argument("--scale", type=int, default=1, help="divide each case's first size by this (a CPU's run)")
    parser.add_argument("--ops", default="", help="comma-separated op types (default: all)")
    parser.add_argument("--shapes", default="", help="semicolon-separated shape names (the table's shape column; some "
                        "hold a comma) to keep (default: all): the 1M-row bfloat16 segment sums take TensorFlow's "
                        "kernel a second a call")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--copies", type=int, default=8, help="input sets, one op each, in one timed call (1: the "
                        "first H200 sweep's way, which times the call for small ops)")
    parser.add_argument("--profile-over", type=float, default=0.0, metavar="RATIO",
                        help="profile the rows whose patched / plain is over RATIO: the device's time and launches "
                        "a call of each form, where the time of a row over the goal goes (on a CPU: the ops' time "
                        "summed over the host's threads)")
    parser.add_argument("--plain-and-patch", action="store_true", help="time the plain op and the patch only (not "
                        "the TF-ops-only form nor the switch): two trees' patches side by side, in a short lease")
    parser.add_argument("--json", default="")
    parser.add_argument("--plot", default="")
    parser.add_argument("--replot", default="", help="a JSON this wrote: its table and --plot again, nothing run")
    args = parser.parse_args(argv)
    if args.replot:
        rows = json.loads(Path(args.replot).read_text())["rows"]
        print(table(rows))
        if args.plot:
            plot(rows, args.plot)
        return 0
    from opbisect.execute.prepared import setup_tensorflow

    tf, kind = setup_tensorflow(args.device)
    cases = [scaled(c, args.scale) for c in (*xent_cases(), *bias_cases(), *segment_cases(), *scatter_cases())]
    cases = [c for c in cases if (not args.ops or c.op in args.ops.split(","))
             and (not args.shapes or c.words in args.shapes.split(";"))]
    rows = run(tf, cases, args, on_cpu=kind == "cpu")
    print(table(rows))
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
