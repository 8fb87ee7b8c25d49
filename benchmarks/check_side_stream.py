"""On the GPU: the fused fingerprint read on a second CUDA stream (kernels/side_stream.h) gives the digests the
step's-stream op gives, while the step's stream frees and rewrites the buffers it reads; then on a whole step.

    python benchmarks/check_side_stream.py [--script examples/bert_like.py] [--calls 20]
    python benchmarks/check_side_stream.py --device cpu --words 4096 --calls 3 --script examples/lm_head_xent.py

1. Lifetimes: a tf.function makes 24 tensors of 32 MB from seeds, digests each on the side stream, and after each
   digest makes the tensor's last use and 3 new tensors of its size, so the allocator hands its buffer on at once
   unless the op still holds it. The side stream runs at the lowest priority, behind those writes. The digests of
   every call must equal those of the same tensors by the step's-stream op and by the CPU kernel.
2. A whole step (default the BERT-like step; OPBISECT_BERT=base for the base size) under
   enable_op_determinism(), captured by `fused` and by `fused-side`: every call's digest vector must be the same
   bits, both ways (a digest that read a buffer after its reuse differs). On a CPU the switch leaves a large AddN's
   race (benchmarks/README.md): the dry run there takes a step without one (--script examples/lm_head_xent.py).
The second command is the script's own dry run on a CPU. Prints PASS or FAIL; exits 0 or 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TENSORS = 24


def lifetimes(tf, fingerprint, args, kind: str) -> bool:
    module = fingerprint.FusedFingerprinter(cuda=kind == "gpu", side_stream=True).module
    words, calls = args.words, args.calls

    @tf.function
    def digested(side_stream: bool):
        digests, sink = [], tf.zeros([words])
        for i in range(TENSORS):
            x = tf.random.stateless_normal([words], (i, 7))
            digests.append(module.opbisect_fingerprint([x], side_stream=side_stream))
            sink += x * 0.5  # x's last use on the step's stream; then its buffer may go to the next three
            for k in range(3):
                sink += tf.random.stateless_normal([words], (i, k)) * float(k)
        if side_stream:
            digests = module.opbisect_await_digests(digests)
        return tf.concat(digests, 0), sink

    with tf.device(f"/{kind.upper()}:0"):
        on_side = [digested(True)[0].numpy() for _ in range(calls)]  # a Python bool: one trace each way
        on_main = digested(False)[0].numpy()
    with tf.device(f"/{kind.upper()}:0"):  # the same bits as in the function (the CPU's normals may differ)
        made = [tf.random.stateless_normal([words], (i, 7)) for i in range(TENSORS)]
    with tf.device("/CPU:0"):
        cpu = np.concatenate([module.opbisect_fingerprint([tf.identity(x)]).numpy() for x in made])
    same = sum(np.array_equal(d, on_main) for d in on_side)
    print(f"lifetimes: {TENSORS} tensors of {words * 4 / 2**20:.2f} MB a call, {calls} calls: {same} equal the step's-"
          f"stream digests; the step's stream == the CPU kernel: {np.array_equal(on_main, cpu)}")
    return same == calls and np.array_equal(on_main, cpu)


def whole_step(tf, fingerprint, args, kind: str) -> bool:
    from opbisect.capture import builder
    from opbisect.capture import taps as capture
    from opbisect.execute.snapshot import Snapshot
    from opbisect.targets.loader import importable, load_target
    from opbisect.trace.trace import trace_step

    tf.config.experimental.enable_op_determinism()  # the step's own kernels give one result: any change is ours
    script, calls = args.script, args.calls
    with importable(script):
        target = load_target(script)
    inputs = target.make_inputs()
    trace = trace_step(target, inputs)
    taps, _ = builder.tappable_tensors(trace)
    start = Snapshot(trace.variables)  # every call from the same state (the step has no random op)
    vectors = {}
    for choice in ("fused", fingerprint.SIDE_STREAM):
        fp, _ = capture.fingerprinter_for(trace, kind, choice)
        inst = capture.build(trace, taps, fp)
        vectors[choice] = []
        for _ in range(calls):
            start.restore()
            vectors[choice].append(np.asarray(inst(inputs)[0]))
    distinct = {k: {v.tobytes() for v in vs} for k, vs in vectors.items()}
    print(f"whole step: {script.name}, {len(taps)} taps, {calls} calls each way: distinct digest vectors "
          f"{ {k: len(d) for k, d in distinct.items()} }, the same set both ways: "
          f"{distinct['fused'] == distinct[fingerprint.SIDE_STREAM]}")
    return all(len(d) == 1 for d in distinct.values()) and distinct["fused"] == distinct[fingerprint.SIDE_STREAM]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", type=Path, default=ROOT / "examples" / "bert_like.py")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--words", type=int, default=8 << 20, help="float32 words of each lifetime tensor (32 MB)")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                        help="cpu: the script's own dry run (the CPU kernel has no side stream)")
    args = parser.parse_args()
    from opbisect.capture import fingerprint
    from opbisect.execute.prepared import setup_tensorflow

    tf, kind = setup_tensorflow(args.device)
    if kind != args.device:
        print(f"no {args.device.upper()}: nothing checked")
        return 125
    ok = lifetimes(tf, fingerprint, args, kind)
    ok = whole_step(tf, fingerprint, args, kind) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
