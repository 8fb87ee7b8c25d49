"""Capture overhead, measured side by side in one run (a benchmark, not a test).

For one target script (default: the BERT-like step) it times, in this process:
  plain         the user's step (its concrete function), one call
  instrumented  the step with its tensors tapped (what `opbisect trace` runs: every tensor but the element-wise
                ops' outputs, which what feeds them fixes; `--taps lean,all` times every tensor tapped beside), one call
  trace         a whole `opbisect trace` with N runs, against N plain steps
and, with --debugger, TF Debugger V2 (`tf.debugging.experimental.enable_dump_debug_info`) in the modes given,
each in a fresh process that times its own plain step first, so every ratio compares two timings taken in
the same process.
Each step is timed in a block of calls, then each instrumented form again in turn with the plain step, call by call
(the ratio of medians and its 95% interval): the blocks drift apart by a few percent on a GPU.

    python benchmarks/capture_overhead.py [--script examples/bert_like.py] [--device cpu|gpu]
        [--repeats 30] [--runs 5] [--debugger NO_TENSOR,FULL_TENSOR]

Prints a table; --json FILE also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRAPPLER_OFF: list[str] = []  # grappler passes turned off in every process (--grappler-off)
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from timing import timed  # noqa: E402 - benchmarks/, the script's folder, is on sys.path


def sync_outputs(result) -> None:
    """Wait until the device has finished all the step's work (not only the op that made one output)."""
    import tensorflow as tf

    flat = [t for t in tf.nest.flatten(result) if hasattr(t, "numpy")]
    if flat:
        flat[0].numpy()
    tf.test.experimental.sync_devices()


def setup(script: Path, device: str):
    from opbisect.execute.prepared import setup_tensorflow
    from opbisect.targets.loader import importable, load_target
    from opbisect.trace.trace import trace_step

    tf, kind = setup_tensorflow(device)
    if GRAPPLER_OFF:  # for both the plain and the instrumented step: isolates what capture costs in fusions
        tf.config.optimizer.set_experimental_options({name: False for name in GRAPPLER_OFF})
    with importable(script):  # the script may import its neighbours (bert_model.py)
        target = load_target(script)
    args = target.make_inputs()
    return tf, kind, target, args, trace_step(target, args)


def tap_sets(trace, names: list[str]) -> dict[str, list[str]]:
    """The tensors each --taps choice taps: `lean` what opbisect trace taps, `all` every tensor (--tap-every-tensor)."""
    from opbisect.capture import builder

    every = builder.every_tensor_tapped(trace)
    return {n: builder.tappable_tensors(every if n == "all" else trace)[0] for n in names}


def measure_capture(script: Path, device: str, repeats: int, runs: int, choices: list[str],
                    profile: int = 0, side_groups: tuple = (96,), taps_named: tuple = ("lean",)) -> dict:
    from opbisect.capture import builder, fingerprint
    from opbisect.capture import taps as capture
    from opbisect.session import run_trace
    from opbisect.settings import TraceSettings

    tf, kind, target, args, trace = setup(script, device)
    sets = tap_sets(trace, list(taps_named))
    steps = {"plain": lambda: trace.concrete(*args)}  # each step timed, then profiled with --profile
    plain = timed(steps["plain"], repeats, sync_outputs)
    variants = {}
    for named, choice, group in [(n, c, g) for n in sets for c in choices
                                 for g in (side_groups if c == fingerprint.SIDE_STREAM else [0])]:
        fp, _ = capture.fingerprinter_for(trace, kind, choice)
        key = (f"{fp.key}, {group} a node" if group else fp.key) + (", every tensor" if named == "all" else "")
        builder.SIDE_GROUP = group or builder.SIDE_GROUP  # taps a side-stream node reads: one form per --side-groups
        inst = capture.build(trace, sets[named], fp)
        start = time.perf_counter()
        inst(args)  # the first call: tracing, grappler, and kernel compilation
        first = time.perf_counter() - start
        steps[key] = lambda inst=inst: inst(args)
        seconds = timed(steps[key], repeats, sync_outputs)  # inst copies its digests to the host
        variants[key] = {"name": fp.name, "ms": seconds * 1e3, "ratio": seconds / plain, "first_call_s": first,
                         "taps": len(sets[named]), "tapped_MB": sum(_bytes(trace.graph, t) for t in sets[named]) / 1e6}
    # The re-imported step with no tap: what the GraphDef round trip costs, apart from fingerprinting.
    bare = capture.build(trace, [], capture.fingerprinter_for(trace, kind)[0])
    steps["no taps"] = lambda: bare(args)
    seconds = timed(steps["no taps"], repeats, sync_outputs, warmup=4)
    variants["no taps"] = {"name": "the step re-imported from its GraphDef, nothing tapped", "ms": seconds * 1e3,
                           "ratio": seconds / plain, "first_call_s": None}
    plain_again = timed(steps["plain"], repeats, sync_outputs)  # drift check
    for key, v in variants.items():  # each against the plain step call by call: the blocks above drift apart
        v["in_turn"] = ratio_in_turn(steps["plain"], steps[key], repeats)
    if profile:  # where the added time lands on the device (the wall time per call is in the table above)
        from benchmarks.device_profile import compared, kernel_times

        print(compared({name: kernel_times(step, calls=profile) for name, step in steps.items()}), flush=True)
    taps = next(iter(sets.values()))
    tapped_bytes = sum(_bytes(trace.graph, t) for t in taps)
    whole = None
    if runs:  # --runs 0: the instrumented step alone (a short lease)
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            run_trace(TraceSettings(script=script, out=Path(out), runs=runs, progress=False, device=device),
                      echo=lambda line: None)
            whole = time.perf_counter() - start
    return {"device": kind, "taps": len(taps), "tapped_MB": tapped_bytes / 1e6, "variants": variants,
            "plain_ms": plain * 1e3, "plain_again_ms": plain_again * 1e3, "ops": len(trace.graph),
            "runs": runs, "trace_s": whole, "n_plain_steps_s": runs * plain,
            "trace_over_plain_steps": whole / (runs * plain) if whole else None}


def ratio_in_turn(plain, step, repeats: int) -> dict:
    """`step` against `plain`, the two called in turn `repeats` times: the ratio of their medians and its 95%
    bootstrap interval, timed as verify times its variants (`opbisect.execute.variants`: each call between device
    syncs). Both have run before, in their blocks: nothing here traces or compiles."""
    from opbisect.execute.variants import ratio_interval, time_steps

    base, times = time_steps([plain, step], (), lambda: None, repeats)
    low, high = ratio_interval(times, base) or (None, None)
    return {"plain_ms": statistics.median(base) * 1e3, "ms": statistics.median(times) * 1e3,
            "ratio": statistics.median(times) / statistics.median(base), "low": low, "high": high}


def _bytes(graph, tid: str) -> int:
    import tensorflow as tf

    op, _, port = tid.rpartition(":")
    if port.startswith("res"):
        return 0
    dtype, shape = graph.attrs(op)["outputs"][int(port)]
    dims = shape.strip("()[]").replace(" ", "").split(",")
    if "None" in shape or "unknown" in shape:
        return 0
    n = 1
    for d in dims:
        if d:
            n *= int(d)
    return n * tf.as_dtype(dtype).size


def measure_debugger(script: Path, device: str, repeats: int, mode: str, dumped_repeats: int) -> dict:
    """Plain step, then the same Python step re-traced under TF Debugger V2 in `mode`, in this process."""
    tf, kind, target, args, trace = setup(script, device)
    plain = timed(lambda: trace.concrete(*args), repeats, sync_outputs)
    if mode == "FULL_TENSOR":
        repeats = dumped_repeats
    with tempfile.TemporaryDirectory() as dump:
        tf.debugging.experimental.enable_dump_debug_info(dump, tensor_debug_mode=mode, circular_buffer_size=-1)
        debugged = tf.function(target.step.python_function, jit_compile=trace.jit_compile)
        concrete = debugged.get_concrete_function(*args)
        # FULL_TENSOR writes every tensor of every step to disk (6.7 GB a step for the base BERT, which filled
        # the H200 machine's 64 GB once): one warm-up, few repeats.
        with_debugger = timed(lambda: concrete(*args), repeats, sync_outputs, warmup=1)
        tf.debugging.experimental.disable_dump_debug_info()
    return {"mode": mode, "plain_ms": plain * 1e3, "debugger_ms": with_debugger * 1e3,
            "ratio": with_debugger / plain}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--script", type=Path, default=ROOT / "examples" / "bert_like.py")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--runs", type=int, default=5, help="runs of the whole `opbisect trace` timed last (0: none)")
    p.add_argument("--debugger-repeats", type=int, default=10,
                   help="timed steps under FULL_TENSOR, which writes every tensor to disk (other modes: --repeats)")
    p.add_argument("--debugger-timeout", type=float, default=300, help="seconds for each debugger mode's process")
    p.add_argument("--debugger", default="", help="comma-separated TF Debugger V2 modes, e.g. NO_TENSOR,FULL_TENSOR")
    p.add_argument("--fingerprints", default="auto",
                   help="comma-separated fingerprinters to time: auto, farmhash, wsum, fused, fused-side (the fused op "
                   "reading on a second CUDA stream)")
    p.add_argument("--taps", default="lean", help="comma-separated tap sets to time: lean (what opbisect trace "
                   "taps), all (every tensor, element-wise outputs too: --tap-every-tensor)")
    p.add_argument("--side-groups", default="96", help="comma-separated taps a node for fused-side, each timed "
                   "(few: each node starts reading sooner; many: fewer launches and events on the host)")
    p.add_argument("--grappler-off", default="", help="comma-separated grappler passes to turn off for every "
                   "step timed, e.g. remapping (which fuses ops unless a tap reads the intermediate)")
    p.add_argument("--profile", type=int, default=0, metavar="CALLS",
                   help="also profile CALLS calls of each step: device time by kernel family, the kernels that grew")
    p.add_argument("--json", type=Path)
    p.add_argument("--child-debugger", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    GRAPPLER_OFF.extend(filter(None, a.grappler_off.split(",")))
    if a.child_debugger:
        print(json.dumps(measure_debugger(a.script, a.device, a.repeats, a.child_debugger, a.debugger_repeats)))
        return
    result = {"script": str(a.script), "debugger": [], "grappler_off": GRAPPLER_OFF,
              "capture": measure_capture(a.script, a.device, a.repeats, a.runs, a.fingerprints.split(","),
                                         a.profile, tuple(int(g) for g in a.side_groups.split(",")),
                                         tuple(a.taps.split(",")))}
    for mode in filter(None, a.debugger.split(",")):
        # A child process per mode: the debugger instruments every function traced after it is enabled.
        cmd = [sys.executable, __file__, "--script", str(a.script), "--device", a.device, "--repeats",
               str(a.repeats), "--debugger-repeats", str(a.debugger_repeats), "--child-debugger", mode,
               "--grappler-off", a.grappler_off]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=a.debugger_timeout)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            d = json.loads(lines[-1]) if lines else {"mode": mode, "error": done.stderr[-500:]}
        except subprocess.TimeoutExpired:
            d = {"mode": mode, "error": f"did not finish in {a.debugger_timeout:.0f} s"}
        result["debugger"].append(d)
        print(f"debugger {mode}: {json.dumps(d)}", flush=True)  # kept even if a later mode is killed
    c = result["capture"]
    print(f"capture overhead: {a.script.name} on {c['device']}, {c['ops']} ops, {c['taps']} tensors tapped "
          f"({c['tapped_MB']:.0f} MB of static-shape outputs), median of {a.repeats} calls"
          + (f", grappler passes off: {', '.join(GRAPPLER_OFF)}" if GRAPPLER_OFF else ""))
    print(f"{'what':<44}{'ms/step':>10}{'ratio':>8}")
    print(f"{'plain step':<44}{c['plain_ms']:>10.2f}{1:>8.2f}")
    print(f"{'plain step, timed again':<44}{c['plain_again_ms']:>10.2f}{c['plain_again_ms'] / c['plain_ms']:>8.2f}")
    for key, v in c["variants"].items():
        first = f"first call {v['first_call_s']:.1f} s; " if v["first_call_s"] is not None else ""
        tapped = f"{v['taps']} taps, {v['tapped_MB']:.0f} MB; " if "taps" in v else ""
        print(f"{'instrumented, ' + key:<44}{v['ms']:>10.2f}{v['ratio']:>8.2f}   ({tapped}{first}{v['name']})")
    for key, v in c["variants"].items():
        t = v["in_turn"]
        interval = f"95%: {t['low']:.2f}-{t['high']:.2f}; " if t["low"] is not None else ""
        print(f"{'in turn with the plain step, ' + key:<44}{t['ms']:>10.2f}{t['ratio']:>8.2f}   "
              f"({interval}the plain step {t['plain_ms']:.2f} ms, {a.repeats} calls of each, alternating)")
    for d in result["debugger"]:
        if "error" in d:
            print(f"TF Debugger V2 {d['mode']}: failed: {d['error']}")
        else:
            print(f"{'TF Debugger V2 ' + d['mode']:<44}{d['debugger_ms']:>10.2f}{d['ratio']:>8.2f}"
                  f"   (its own plain step: {d['plain_ms']:.2f} ms)")
    if c["trace_s"] is not None:
        print(f"whole `opbisect trace --runs {c['runs']}`: {c['trace_s']:.1f} s = {c['trace_over_plain_steps']:.0f}x "
              f"the {c['runs']} plain steps it examines ({c['n_plain_steps_s'] * 1e3:.0f} ms)")
    if a.json:
        a.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
