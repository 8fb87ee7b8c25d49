"""Command line: parse and dispatch, nothing else. Every way out maps to the exit contract in opbisect.errors,
with one line on stderr; nothing unexpected ever exits 0 or 1 (those are verdicts)."""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from .errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    OpbisectError,
    TargetError,
    Terminated,
    one_line,
    stop_if_came,
    stops_caught,
)
from .settings import FixSettings, RunSettings, TraceSettings, VerifySettings


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2, which git bisect would read as "bad": usage is 128
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"opbisect: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="opbisect", description="Find the ops that make a TensorFlow training step nondeterministic. "
                "Exit codes: 0 deterministic (verify: the patched step is bitwise reproducible), 1 found, "
                "125 cannot test this revision, 128 usage error, "
                "129 report not written, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 170 internal error.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    TraceSettings.add_arguments(sub.add_parser("trace", help="run a step N times from one restored state and "
                                                              "name the source ops"))
    VerifySettings.add_arguments(sub.add_parser("verify", help="run the plain step, the step with the report's "
                                                               "sources patched, and TensorFlow's switches side by "
                                                               "side; exit 0 when the patched step is bitwise "
                                                               "reproducible"))
    FixSettings.add_arguments(sub.add_parser("fix", help="from the script to a verified fix: trace rounds, each "
                                                         "with every source found so far patched, until the step "
                                                         "is reproducible; then verify; exit 0 when the "
                                                         "recommended configuration is bitwise reproducible"))
    RunSettings.add_arguments(sub.add_parser("run", help="run a training script as it is (python SCRIPT -- ARGS), "
                                                         "with only the ops --patch names replaced in its training "
                                                         "steps; its own exit code"))
    r = sub.add_parser("report", help="re-make the report's views from a saved record, running nothing")
    r.add_argument("record", type=Path, help="a report folder (reports/<script>) or its record.json")
    r.add_argument("--out", type=Path, default=None, help="folder that receives the report folder (default: where "
                                                          "the record's report folder is)")
    r.add_argument("--html", action="store_true", help="also write report.html")
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line; what follows `--` is the script's own arguments (`after_dashes`)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    args = _parser().parse_args(argv[:cut])
    args.after_dashes = argv[cut + 1:]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(list(sys.argv[1:] if argv is None else argv))
    try:
        with stops_caught():  # SIGTERM's cleanup runs as for Ctrl-C
            code = _dispatch(args)
            stop_if_came()
            return code
    except TargetError as exc:
        if exc.user_traceback:
            print(exc.user_traceback, file=sys.stderr, end="")
        print(f"opbisect: cannot test: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except OpbisectError as exc:
        shown = getattr(exc, "shown", "")  # a child's: the user's traceback, or a crash's last lines
        if shown:
            print(shown.rstrip("\n"), file=sys.stderr)
        print(f"opbisect: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("opbisect: interrupted (no report is left half-written)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("opbisect: terminated (no report is left half-written)", file=sys.stderr)
        return EXIT_TERMINATED
    except Exception as exc:  # noqa: BLE001 - a bug in opbisect: never read as a verdict
        traceback.print_exc(file=sys.stderr)
        print(f"opbisect: internal error ({type(exc).__name__}: {exc}); this is an opbisect bug: please report it "
              f"with the script and this traceback", file=sys.stderr)
        return EXIT_INTERNAL


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "trace":
        settings = TraceSettings.from_namespace(args)
        if settings.probe != Path():  # a child of the fresh-process check: the script to its training call, no trace
            from .execute.children import leave_now
            from .execute.fresh import probe

            settings.validate()
            leave_now(probe(settings))
        from . import session

        return session.run_trace(settings)
    if args.command == "verify":
        from . import verify

        return verify.run_verify(VerifySettings.from_namespace(args))
    if args.command == "run":
        from .execute.children import leave_now
        from .patched_run import run

        settings = RunSettings.from_namespace(args)
        code = run(settings)
        if settings.digests != Path():  # a run of the user's test (fix's, trace's): its parent waits on its exit
            leave_now(code)
        return code
    if args.command == "fix":
        from .fix import run_fix

        return run_fix(FixSettings.from_namespace(args))
    from . import session

    return session.rerun_report(args.record, args.out, html=args.html)


if __name__ == "__main__":
    sys.exit(main())
