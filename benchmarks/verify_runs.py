"""What one of verify's runs costs on a large state, with and without a copy of the whole state to the host.

verify runs each variant from one state, 10 runs and, where they agree, on to 100 (`--confirm-runs`). Until
2026-12-07 every run also copied every variable to the host and compared it with the first run's (the spread);
now only a run whose fingerprints differ from the first run's does. This times `execute.variants.measure` on a
deterministic step over a state of --mb megabytes, as it is and with that copy made every run, in turn, --rounds
times; a ratio of medians, one process.

    .venv/bin/python benchmarks/verify_runs.py --mb 384 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=384, help="the state's size: three float32 variables")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--confirm", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import tensorflow as tf

    from opbisect.execute import variants

    words = args.mb * 1024 * 1024 // 4 // 3
    state = {f"v{i}": tf.Variable(tf.random.stateless_normal([words], seed=[i, 0])) for i in range(3)}
    start = {k: tf.identity(v) for k, v in state.items()}

    def restore():
        for k, v in state.items():
            v.assign(start[k])

    @tf.function
    def step():
        for v in state.values():
            v.assign_add(v * 1e-3)
        return tf.reduce_sum(state["v0"][:10])

    def fingerprint(out):
        return float(out.numpy()), tuple(float(tf.reduce_sum(v[:1000])) for v in state.values())

    held = {}

    def copying(out):  # the run as before: its fingerprints, and the whole state on the host, compared with the first
        values = variants.values_after(out, state)
        variants.difference(held.setdefault("first", values), values)
        return fingerprint(out)

    ms = {"as it is": [], "the state copied every run": []}
    for _ in range(args.rounds):
        for name, fp in zip(ms, (fingerprint, copying)):
            began = time.perf_counter()
            done = variants.measure(step, restore, fp, state, args.runs, args.confirm)
            ms[name].append(1000 * (time.perf_counter() - began) / len(done.results))
    print(f"state {args.mb} MB, {args.confirm} runs a measure, {args.rounds} rounds in turn; ms a run (median):")
    for name, values in ms.items():
        print(f"  {name:<28} {statistics.median(values):8.1f}   {' '.join(f'{v:.1f}' for v in values)}")
    print(f"  ratio {statistics.median(ms['the state copied every run']) / statistics.median(ms['as it is']):.2f}x")


if __name__ == "__main__":
    main()
