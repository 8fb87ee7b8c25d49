"""What starting the seeded random ops anew costs a run: a step with dropout, restored and run, side by side in one
process, four ways (seconds per restore + step, the median of --repeats; ratios to the first):

    plain           the step as written, restored, run (its dropout draws the next numbers: not a fair replay)
    twin            the step as opbisect runs it: each dropout drawing from its restored state variable
    kernel cache    the step as written, TensorFlow's kernel cache cleared before each run (opbisect's way for an op
                    with no stateless twin, or inside a loop body)
    set_seed        tf.random.set_seed before each run (which clears the same cache)

    python benchmarks/seeded_restart.py [--layers 4] [--width 512] [--repeats 20]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCRIPT = """
import numpy as np
import tensorflow as tf
import tf_keras as keras

keras.utils.set_random_seed(0)
layers = []
for _ in range({layers}):
    layers += [keras.layers.Dense({width}, activation="relu"), keras.layers.Dropout(0.1)]
model = keras.Sequential(layers + [keras.layers.Dense(10)])
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
data = (rng.standard_normal((64, {width})).astype("float32"), rng.integers(0, 10, 64).astype("int32"))
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)

    import tempfile

    from benchmarks.timing import timed
    from opbisect import tfcompat
    from opbisect.execute.prepared import prepare
    from opbisect.execute.snapshot import Snapshot
    from opbisect.settings import TraceSettings
    from opbisect.targets.loader import importable, load_target
    from opbisect.trace.trace import trace_step

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "dropout_mlp.py"
        script.write_text(SCRIPT.format(layers=args.layers, width=args.width))
        with importable(script):
            prepared = prepare(TraceSettings(script=Path(script), device=args.device))
            tf = prepared.tf
            batch = prepared.target.make_inputs()
            original = trace_step(load_target(script), batch)  # the step as written, its own variables
            as_written = Snapshot(dict(original.variables))
            restarted = prepared.snapshot()
            seed = tfcompat.global_seed()

            def run(snapshot, call, before=lambda: None):
                def once():
                    before()
                    snapshot.restore()
                    return call(*batch)
                return once

            sync = lambda out: tf.nest.map_structure(lambda t: t.numpy(), out)  # noqa: E731
            ways = {
                "plain": run(as_written, original.concrete),
                "twin": run(restarted, prepared.trace.concrete),
                "kernel cache": run(as_written, original.concrete, tfcompat.clear_kernel_cache),
                "set_seed": run(as_written, original.concrete, lambda: tf.random.set_seed(seed)),
            }
            seconds = {name: timed(fn, args.repeats, sync) for name, fn in ways.items()}
    base = seconds["plain"]
    print(f"seeded restart: {args.layers} Dense+Dropout layers of {args.width}, batch 64, "
          f"{len(prepared.restart.draws)} seeded ops, on {prepared.kind.upper()} (TF {tf.__version__})")
    for name, s in seconds.items():
        print(f"  {name:<13} {1000 * s:9.2f} ms a run  {s / base:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
