"""Command line: parse and dispatch, nothing else. Exit codes: 0 clean, 1 found, 2 usage, 125 cannot test."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import EXIT_USAGE, OpbisectError, TargetError
from .settings import DEVICES, FINGERPRINTS


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opbisect", description="Find the ops that make a TensorFlow training step "
                                "nondeterministic.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("trace", help="run a step N times from one restored state and name the source ops")
    t.add_argument("script", type=Path, help="model_step.py: defines `step` and `inputs` (or `model` and `data`)")
    t.add_argument("--runs", type=int, default=5, help="runs of each pass (default 5, at least 2)")
    t.add_argument("--out", type=Path, default=Path("reports"), help="folder for <script>.csv and "
                   "<script>.runs.json (default reports/)")
    t.add_argument("--step", dest="step_name", default="step", help="name of the step in the script")
    t.add_argument("--inputs", dest="inputs_name", default="inputs", help="name of the step's arguments")
    t.add_argument("--device", choices=DEVICES, default="auto",
                   help="auto: the GPU when TensorFlow sees one")
    t.add_argument("--no-pin-grappler", dest="pin_grappler", action="store_false",
                   help="analyse under your grappler config instead of pinning constant folding and arithmetic "
                        "optimization off for the plain and the instrumented step")
    t.add_argument("--fingerprint", choices=FINGERPRINTS, default="auto",
                   help="auto: farmhash on CPU, the fused op on GPU, the weighted sum under XLA")
    t.add_argument("--steps", type=int, default=1, help="consecutive steps per run: find the first step whose "
                   "result differs, then the sources of each step from the identical state before it")
    t.add_argument("--processes", type=int, default=1, help="repeat the experiment in this many fresh Python "
                   "processes and compare them op by op (cuDNN autotuning, hash-seed-dependent tracing, "
                   "unseeded initializers)")
    t.add_argument("--magnitude-runs", type=int, default=0, help="runs of the magnitude pass (default: --runs)")
    t.add_argument("--no-progress", dest="progress", action="store_false", help="no progress display")
    r = sub.add_parser("report", help="re-make the CSV and summary from a saved <script>.runs.json")
    r.add_argument("record", type=Path)
    r.add_argument("--out", type=Path, default=None, help="folder for the CSV (default: beside the record)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # argparse exits 2 on usage errors, as git bisect's scripts expect
    try:
        if args.command == "trace":
            from .pipeline import run_trace
            from .settings import TraceSettings

            options = {k: v for k, v in vars(args).items() if k != "command"}
            return run_trace(TraceSettings(**options))
        from .pipeline import rerun_report

        if not args.record.exists():
            print(f"opbisect: no such file: {args.record}", file=sys.stderr)
            return EXIT_USAGE
        try:
            return rerun_report(args.record, args.out)
        except (ValueError, KeyError) as exc:
            print(f"opbisect: {args.record} is not an opbisect record ({exc})", file=sys.stderr)
            return EXIT_USAGE
    except TargetError as exc:
        if exc.user_traceback:
            print(exc.user_traceback, file=sys.stderr, end="")
        print(f"opbisect: {exc}", file=sys.stderr)
        return exc.exit_code
    except OpbisectError as exc:
        print(f"opbisect: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("opbisect: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
