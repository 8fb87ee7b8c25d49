"""Step by step, whether a mixed-precision `fit` applied its update or skipped it (a non-finite gradient: Keras'
loss scale halves and no weight moves), as written and under a switch set in the environment, each in a fresh
process on the same batches.

verify found the global switch's BERT-base mixed step leaving every weight as it was from verify's starting state,
its loss scale halved (H100, reports/h100/shapes/README.md#lease18): its 3.05x is the cost of a skipped update.
This says whether training under the switch skips steps the plain step does not.

    OPBISECT_BERT=base python benchmarks/loss_scale_steps.py --steps 20            # as written, then the switch
    python benchmarks/loss_scale_steps.py --steps 4 --env XLA_FLAGS=--xla_gpu_autotune_level=0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def child(steps: int) -> None:
    """The example's model trained `steps` steps on `steps` batches; per step its loss scale, whether any weight
    moved, and Keras' loss (the epoch's mean so far), as one JSON line."""
    sys.path.insert(0, str(EXAMPLES))
    import keras
    import numpy as np

    keras.mixed_precision.set_global_policy("mixed_float16")
    from bert_model import batch, build_model

    keras.utils.set_random_seed(0)
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batches = [batch(seed) for seed in range(steps)]
    ids, labels = (np.concatenate(parts) for parts in zip(*batches))
    rows, seen = len(batches[0][0]), []

    class Steps(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.before = self._weights()

        def _weights(self):
            return [w.numpy().tobytes() for w in model.trainable_weights]

        def on_train_batch_end(self, step, logs=None):
            after = self._weights()
            seen.append({"step": step + 1, "scale": float(model.optimizer.dynamic_scale.numpy()),
                         "updated": after != self.before, "loss": float(logs["loss"])})
            self.before = after

    model.fit(ids, labels, batch_size=rows, epochs=1, shuffle=False, verbose=0, callbacks=[Steps()])
    print(json.dumps(seen))


def _cell(step: dict) -> str:
    return f"scale {step['scale']:g}, {'updated' if step['updated'] else 'SKIPPED'}, mean loss {step['loss']:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--env", default="TF_DETERMINISTIC_OPS=1", help="NAME=VALUE: the switch the second run sets")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.steps)
    name, _, value = args.env.partition("=")
    runs = {}
    for label, extra in (("as written", {}), (args.env, {name: value})):
        done = subprocess.run([sys.executable, __file__, "--child", "--steps", str(args.steps)], text=True,
                              capture_output=True, env={**os.environ, **extra})
        lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
        runs[label] = json.loads(lines[-1]) if done.returncode == 0 and lines else []
        if not runs[label]:
            print(f"{label}: the run failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    print(f"{'step':>4}  " + "  ".join(f"{label[:40]:>40}" for label in runs))
    for k in range(args.steps):
        cells = [_cell(r[k]) if k < len(r) else "-" for r in runs.values()]
        print(f"{k + 1:>4}  " + "  ".join(f"{cell:>40}" for cell in cells))
    for label, r in runs.items():
        print(f"{label}: {sum(not s['updated'] for s in r)} of {len(r)} steps skipped")


if __name__ == "__main__":
    main()
