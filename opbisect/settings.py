"""The settings of one `opbisect trace`, each option defined once (as torch.fx's net_min_base keeps its settings).

Each field carries its command-line flag, help and check in its metadata: the CLI's parser is generated from
them (`add_arguments`), `validate()` reads the same checks, and a child process gets `to_argv()`, so an option
cannot silently vanish on its way to the child of `--processes`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

# The grappler passes whose decisions capture moves, pinned off for the plain step's pinned pass and the
# instrumented step alike. Constant folding and arithmetic optimization: 1-ulp shifts of the final weights until
# both were off for the plain and the instrumented step (measured). The memory optimizer rewrites a large AddN
# into an accumulation in thread-finish order when it judges memory tight, which taps (keeping tensors alive)
# make it judge: seen on the BERT-like fit step, where it added 32 nodes to the tapped graph and none to the
# plain one, and the AddN then varied. The dependency optimizer (it prunes control edges and Identity nodes; it
# changes no value) and grappler's second round (a repeat of every pass, which changed nothing in the graphs
# measured) are off for cost: on a tapped graph three times the step's size they were two thirds of grappler's
# 10 s at 25k ops (benchmarks/README.md, Scale).
PINNED_GRAPPLER = {"constant_folding": False, "arithmetic_optimization": False, "memory_optimization": False,
                   "dependency_optimization": False, "meta_optimizer_iterations": 1}
DEVICES = ("auto", "cpu", "gpu")
FINGERPRINTS = ("auto", "farmhash", "wsum", "fused")


_SPELLING = {"choices": None, "minimum": None, "positional": False, "hidden": False, "after_dashes": False}


def option(default, help: str, flag: str | None = None, **spelling):
    """A settings field with its command-line spelling. A bool's flag turns it to `not default`. `spelling`, as in
    argparse: `choices`, `minimum`, `positional`; `hidden`: an option opbisect gives its own child processes, not
    listed in --help; `after_dashes`: the arguments after `--`, for the user's script (a tuple)."""
    unknown = set(spelling) - set(_SPELLING)
    if unknown:
        raise TypeError(f"option() got unknown spelling {sorted(unknown)}")
    spelling = {**_SPELLING, **spelling}
    kwargs = {"default_factory": tuple} if spelling["after_dashes"] else {"default": default}
    hidden = spelling.pop("hidden")
    return dataclasses.field(**kwargs, metadata={"help": argparse.SUPPRESS if hidden else help, "flag": flag,
                                                 **spelling})


def _script_args():
    return option((), "the script's own arguments, after --", after_dashes=True)


def _at():
    return option("", "which training call of a script run as it is (no `step`/`model` defined): fit:N (the N-th "
                      "Keras fit or train_on_batch), call:N (the N-th call of a training step), step:NAME (the "
                      "tf.function NAME); default: the first", flag="--at")


def _device():
    return option("auto", "auto: the GPU when TensorFlow sees one", choices=DEVICES)


def _fingerprint():
    return option("auto", "auto: farmhash for a small CPU step, the fused op for a large one and on a GPU, the "
                          "weighted sum under XLA",
                  choices=FINGERPRINTS)


def _cpu_reference():
    return option("auto", "the plain step on the CPU, in a fresh process from the same state: the reference each "
                          "variant's numbers are compared with (auto: when the step runs on a GPU)",
                  choices=("auto", "on", "off"))


def _seed():
    return option("", "pin every seed before the script runs, as keras.utils.set_random_seed(N) at its top would: "
                      "Python's random, NumPy, TensorFlow and Keras (the script's own seeding still runs)")


# 100: two runs of 100 steps rule out a variation firing in 1.5% of steps. At 10, fix ended on exit 0 on an H100
# whose patched step parted in 3 of 9 fresh runs before step 10 (reports/h100/shapes/README.md#lease21)
CHECK_STEPS = 100


def _check_steps():
    return option(CHECK_STEPS, "the user's test: two fresh runs of the script (`opbisect run`), side by side, compared "
                               f"after each of their first K training steps (default {CHECK_STEPS}; 0: each run to the "
                               f"script's end; the target contract, which has none: {CHECK_STEPS})", minimum=0)


# 100: a variant alike in verify's first runs runs on to 100 in all, ruling out a difference in over 3% of runs. On an
# H200 BERT-base under mixed precision and its patch gave one result in 10 runs, while 2 of 100 uninstrumented runs in
# one process differed (under XLA's fusion switch) and two fresh runs parted after step 20
# (reports/h200/shapes/README.md, fifth lease)
CONFIRM_RUNS = 100


def _confirm_runs():
    return option(CONFIRM_RUNS, "verify: a variant whose first runs all agree runs on to this many in all before it "
                                f"counts as reproducible, where a rarer variation shows (default {CONFIRM_RUNS}; 0: "
                                "the first runs only); the CPU reference does not", minimum=0)


def _check_seed(seed: str) -> None:
    from .errors import UsageError

    if seed and not seed.isdigit():
        raise UsageError(f"--seed takes a non-negative integer (got {seed!r})")


def _step_name():
    return option("step", "name of the step in the script", flag="--step")


def _inputs_name():
    return option("inputs", "name of the step's arguments", flag="--inputs")


class Settings:
    """The command line of a settings dataclass, generated from its fields."""

    # -- the command line ------------------------------------------------------------------------------
    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        for f in dataclasses.fields(cls):
            m = f.metadata
            if m["after_dashes"]:
                continue  # the command line splits them off at `--` (cli.main)
            if m["positional"]:
                parser.add_argument(f.name, type=Path, help=m["help"])
            elif f.type == "bool" or isinstance(f.default, bool):
                parser.add_argument(_flag(f), dest=f.name, help=m["help"],
                                    action="store_false" if f.default else "store_true")
            else:
                parser.add_argument(_flag(f), dest=f.name, type=type(f.default), default=f.default,
                                    choices=m["choices"], help=m["help"],
                                    metavar=None if m["choices"] else _flag(f).lstrip("-").upper().replace("-", "_"))

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> "Settings":
        """The settings of a parsed command line (`ns.after_dashes`: what followed `--`, cli.parse)."""
        return cls(**{f.name: tuple(getattr(ns, "after_dashes", ())) if f.metadata["after_dashes"]
                      else getattr(ns, f.name) for f in dataclasses.fields(cls)})

    def to_argv(self) -> list[str]:
        """The command-line arguments that give these settings (every option, so nothing is lost)."""
        argv, after = [], []
        for f in dataclasses.fields(self):
            value, m = getattr(self, f.name), f.metadata
            if m["after_dashes"]:
                after = ["--", *value] if value else []
            elif m["positional"]:
                argv.insert(0, str(value))
            elif isinstance(f.default, bool):
                if value != f.default:
                    argv.append(_flag(f))
            else:
                argv += [_flag(f), str(value)]
        return argv + after

    def validate(self) -> None:
        from .errors import UsageError

        for f in dataclasses.fields(self):
            value, m = getattr(self, f.name), f.metadata
            if m["minimum"] is not None and value < m["minimum"]:
                raise UsageError(f"{_flag(f)} must be at least {m['minimum']} (got {value})")
            if m["choices"] and value not in m["choices"]:
                raise UsageError(f"{_flag(f)} must be one of {', '.join(m['choices'])} (got {value!r})")


@dataclasses.dataclass
class StepOptions(Settings):
    """What names a script's training step and how it runs: the options every command that runs a step shares,
    defined once here and composed into each (trace, verify, fix)."""

    script: Path = option(None, "train.py: your training script, run as it is (or a script that defines `step` and "
                                "`inputs`, or `model` and `data`: the target contract)", positional=True)
    step_name: str = _step_name()
    inputs_name: str = _inputs_name()
    device: str = _device()
    fingerprint: str = _fingerprint()
    at: str = _at()
    script_args: tuple = _script_args()


@dataclasses.dataclass
class TraceSettings(StepOptions):
    runs: int = option(5, "runs of each pass (default 5, at least 2)", minimum=2)
    out: Path = option(Path("reports"), "folder that receives the report folder <script>/ (default reports/)")
    pin_grappler: bool = option(True, "analyse under your grappler config instead of pinning constant folding, "
                                      "arithmetic optimization, the memory and dependency optimizers and grappler's "
                                      "second round off for the plain and the instrumented step",
                                flag="--no-pin-grappler")
    steps: int = option(1, "consecutive steps per run: find the first step whose result differs, then the "
                           "sources of each step from the identical state before it", minimum=1)
    processes: int = option(1, "repeat the experiment in this many fresh Python processes and compare them op by "
                               "op (cuDNN autotuning, hash-seed-dependent tracing, unseeded initializers)",
                            minimum=1)
    replicas: str = option("", "ladder of replica counts under tf.distribute, e.g. 1,all: the experiment again in a "
                               "fresh process per rung, the strategy limited to its first N devices, to tell an op "
                               "inside a replica from one that needs several (a collective); on GPUs the full rung "
                               "also runs under NCCL_ALGO=Ring and under NCCL_NVLS_ENABLE=0")
    replica_limit: int = option(0, "child of --replicas: limit each MirroredStrategy to its first N devices",
                                minimum=0, hidden=True)
    workers: int = option(1, "MultiWorkerMirroredStrategy: run the experiment as this many workers on this machine, "
                             "one process each with its TF_CONFIG, every decision that adds step calls taken by all "
                             "of them together, and name each source with its worker", minimum=1)
    worker_index: int = option(0, "child of --workers: this worker's task index", minimum=0, hidden=True)
    agree_dir: Path = option(Path(), "child of --workers: the folder where the workers agree", hidden=True)
    max_runs: int = option(0, "look harder: when the first --runs leave the step deterministic, or a claim (capture "
                                "hid or created the difference, grappler is involved) too few runs to support, run "
                                "every pass again with this many runs (default 0: never)", minimum=0)
    magnitude_runs: int = option(0, "runs of the magnitude pass (default 0: as many as --runs)", minimum=0)
    patch: str = option("", "trace the step with these ops already patched (a report's sources.csv, op types or op "
                            "names, comma-separated): find the sources the patched ones hid")
    tap_every: bool = option(False, "fingerprint every tensor, element-wise ops' outputs too (by default compare "
                                    "derives those from what feeds them, which fixes them bit for bit)",
                             flag="--tap-every-tensor")
    replay: bool = option(True, "do not replay each source alone on its recorded inputs (nor write reproducers)",
                          flag="--no-replay")
    replay_runs: int = option(20, "runs of each source alone on its recorded inputs", minimum=2)
    html: bool = option(False, "also write report.html, one self-contained page", flag="--html")
    progress: bool = option(True, "no progress display", flag="--no-progress")
    fresh: bool = option(True, "do not bring the script to its training call in a second fresh process (the fresh-"
                               "process check: your own test of two runs, on every variable, batch and step result)",
                         flag="--no-fresh-check")
    script_check: bool = option(True, "where the step comes out deterministic, do not run the script twice more, "
                                      "side by side, to compare their first --check-steps training steps (your own "
                                      "test, past the training call analysed here)", flag="--no-script-check")
    check_steps: int = _check_steps()
    seed: str = _seed()
    probe: Path = option(Path(), "child of the fresh-process check: write the probe here and stop", hidden=True)
    pins: str = option("", "child of the fresh-process check: the sources of randomness to pin", hidden=True)

    def validate(self) -> None:
        from .errors import UsageError

        super().validate()
        _check_seed(self.seed)
        _check_max_runs(self.runs, self.max_runs)
        if self.magnitude_runs == 1:
            raise UsageError("--magnitude-runs must be at least 2 (a difference needs two runs), or 0 for as many as "
                             "--runs (got 1)")
        if self.replicas:
            rungs = self.replica_rungs()
            if self.processes > 1:
                raise UsageError("--replicas and --processes each run the experiment in child processes: use one")
            if len(rungs) < 2:
                raise UsageError(f"--replicas needs at least two rungs, e.g. 1,all (got {self.replicas!r})")
        if self.workers > 1 and (self.processes > 1 or self.replicas):
            raise UsageError("--workers runs the experiment in child processes, as --processes and --replicas do: "
                             "use one")

    def replica_rungs(self) -> list[int]:
        """`--replicas` as replica limits, in the order given: 0 for `all` (the strategy as the script makes it)."""
        from .errors import UsageError

        rungs = []
        for word in self.replicas.split(","):
            word = word.strip().lower()
            if word != "all" and not (word.isdigit() and int(word) >= 1):
                raise UsageError(f"--replicas takes counts of at least 1 and `all`, comma-separated (got {word!r})")
            rungs.append(0 if word == "all" else int(word))
        if len(set(rungs)) < len(rungs):
            raise UsageError(f"--replicas names a rung twice ({self.replicas!r})")
        return rungs


VARIANTS = ("", "global", "family", "patched", "cpu")


@dataclasses.dataclass
class VerifySettings(StepOptions):
    patch: str = option("", "what to replace: a report's sources.csv (or its report folder), or op types or op "
                            "names, comma-separated")
    runs: int = option(5, "runs of each variant from one state (default 5, at least 2)", minimum=2)
    confirm_runs: int = _confirm_runs()
    timing_runs: int = option(20, "steps of each variant timed after its runs, each from the same state; the plain "
                                  "and patched steps alternate (default 20; 0: time the --runs only)", minimum=0)
    steps: int = option(0, "consecutive steps per run, from the data's first batch (fit and batches() forms; default: "
                           "through the step at which a --patch CSV's sources first differed, 1 without one)",
                        minimum=0)
    out: Path = option(Path("reports"), "folder that receives <script>-verify/ (default reports/)")
    switches: bool = option(True, "do not run the global switch and the family switches (child processes)",
                            flag="--no-switches")
    cpu_reference: str = _cpu_reference()
    progress: bool = option(True, "no line on stderr as each variant finishes", flag="--no-progress")
    variant: str = option("", "child: which switch this process runs under", choices=VARIANTS, hidden=True)
    exchange: Path = option(Path(), "child: the folder shared with the parent", hidden=True)

    def validate(self) -> None:
        from .errors import UsageError

        super().validate()
        if not self.patch:
            raise UsageError("verify needs --patch: a report's sources.csv, or op types or op names")

    @property
    def confirming(self) -> int:
        """The runs a variant alike in its --runs runs on to in all (0: none: --confirm-runs is not above --runs)."""
        return self.confirm_runs if self.confirm_runs > self.runs else 0


def _check_max_runs(runs: int, max_runs: int) -> None:
    from .errors import UsageError

    if 0 < max_runs <= runs:
        raise UsageError(f"--max-runs must be more than --runs ({runs}), or 0 (got {max_runs})")


def shared(source: Settings, kind: type, **changes) -> Settings:
    """Settings of command `kind` made from another command's (`source`): every option the two share, by name, then
    `changes`. So an option defined once reaches each child command that takes it (fix's rounds, its verify, its
    runs), and a new one needs no line here."""
    names = {f.name for f in dataclasses.fields(kind)}
    taken = {f.name: getattr(source, f.name) for f in dataclasses.fields(source) if f.name in names}
    return kind(**{**taken, **changes})


def _flag(f: dataclasses.Field) -> str:
    return f.metadata["flag"] or "--" + f.name.replace("_", "-")


@dataclasses.dataclass
class FixSettings(StepOptions):
    runs: int = option(5, "runs of each trace round (default 5, at least 2)", minimum=2)
    max_rounds: int = option(6, "trace rounds at most: each traces the step with every source found so far "
                                "patched (default 6; ResNet50 on an H200 needed 4)", minimum=1)
    max_runs: int = option(0, "look harder in each round: where its --runs leave the step deterministic or a claim "
                                "unsettled (the step varied and capture's runs did not, too few runs to tell), every "
                                "pass of that round again with this many runs (default 0: four times --runs)",
                           minimum=0)
    verify_runs: int = option(10, "runs of each variant in the final verify (default 10)", minimum=2)
    confirm_runs: int = _confirm_runs()
    timing_runs: int = option(20, "steps of each variant timed in the final verify (default 20)", minimum=0)
    cpu_reference: str = _cpu_reference()
    out: Path = option(Path("reports"), "folder that receives <script>-fix/ (default reports/)")
    check_steps: int = _check_steps()
    processes: int = option(1, "each round's trace in this many fresh processes, compared op by op (trace "
                               "--processes)", minimum=1)
    progress: bool = option(True, "no line per round", flag="--no-progress")
    resume: bool = option(False, "go on from what a stopped (or killed) fix of this script finished (its rounds, "
                                 "and verify where it ended), kept in <out>/.<script>-fix.resume/; taken where the "
                                 "script, the options, TensorFlow and the environment are the same (not the modules "
                                 "or data the script reads: after changing those, start over)", flag="--resume")

    def validate(self) -> None:
        super().validate()
        _check_max_runs(self.runs, self.max_runs)

    def round_max_runs(self) -> int:
        """The runs a round looks harder with."""
        return self.max_runs or 4 * self.runs


@dataclasses.dataclass
class RunSettings(Settings):
    script: Path = option(None, "train.py: the training script, run as it is", positional=True)
    patch: str = option("", "what to replace in its training steps: a fix's patch.csv or a report's sources.csv (or "
                            "their folders), or op types or op names, comma-separated (default: nothing)")
    seed: str = _seed()
    steps: int = option(0, "stop after the script's first K training steps (calls of its train function or "
                           "training step) with the state digested after each (default 0: run to the end)",
                        minimum=0)
    digests: Path = option(Path(), "write a digest of every variable at the first training call and after every "
                                   "step to this JSON file (two runs' files compare step by step)")
    device: str = _device()
    at: str = _at()  # fix passes its own: steps are counted and digested from the call its patch was made for
    script_args: tuple = _script_args()

    def validate(self) -> None:
        super().validate()
        _check_seed(self.seed)
