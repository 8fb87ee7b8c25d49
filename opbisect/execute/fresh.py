"""The fresh-process check, run (analysis/fresh.py decides): a second fresh process of the script, brought to the same
training call beside this process's own passes, and where the two start it differently, the experiment that names the
source of randomness behind it.

    with FreshRun(settings) as fresh:           a child `opbisect trace SCRIPT --probe FILE` starts at once, in the
        record, files = experiment(settings)    user's environment (an unset PYTHONHASHSEED stays unset)
        record = fresh.checked(record)          its probe against this process's; where the state or the batches
                                                differ, pairs of fresh probes, each pair with sources pinned
                                                (ir/randomness.py), until a pair agrees; where this process
                                                found the step deterministic and the probes agree, two more
                                                fresh runs of the script (execute/usertest.py), started before
                                                the probe is awaited, through --check-steps steps: the user's
                                                test past the training call analysed (a later fit, a phase)
    probe(settings)                             in the child: the step prepared (the script run to its training
                                                call), one plain run; its probe file

A probe that fails to come (the script fails in the child) leaves the verdict this process's own and says why.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

from .. import tfcompat
from ..analysis import fresh as decide
from ..errors import EXIT_INTERRUPTED, EXIT_TERMINATED
from ..ir.randomness import SEED
from ..record import store
from ..record.fixing import run_command
from ..record.model import FreshCheck, Probe, Record
from . import children
from .digest import combined, of_variables, value_digest

FIRST = "a"  # the second fresh process's probe file (this process is the first)
# A machine with this many cores runs the script's two more runs beside the experiment (which keeps about two busy,
# the probe's child one): on fewer, measured on 2 cores, they slowed both verdicts more than running them after did
SPARE_CORES = 6


class FreshRun:
    def __init__(self, settings):
        self.settings = settings
        self.folder: Path | None = None
        self.running: list[subprocess.Popen] = []
        self.mine: Probe | None = None  # this process's probe (`own`, called by the experiment)

    def __enter__(self) -> "FreshRun":
        self._tmp = store.temporary("opbisect-fresh-")
        self.folder = Path(self._tmp.__enter__())
        self.first = self._start([], FIRST)
        self.early = None
        if (os.cpu_count() or 1) >= SPARE_CORES and self._script_trains():  # beside the experiment, not after
            from .usertest import UserTestRuns

            self.early = UserTestRuns.started(self.settings, self.folder, True, patch=self.settings.patch,
                                              seed=self.settings.seed)
        return self

    def _script_trains(self) -> bool:
        """Whether the script's runs are asked for and the script trains by itself (read, not run: the target
        contract's names make none)."""
        from ..targets.intercept import defines_contract

        s = self.settings
        return s.script_check and not defines_contract(s.script, s.step_name, s.inputs_name)

    def __exit__(self, *exc) -> None:
        if self.early is not None:  # ended, read or not (a failure before its verdict leaves them running)
            self.early.stopped()
        for proc in self.running:
            if proc.poll() is None:
                children.end(proc)
        self._tmp.__exit__(*exc)

    def _start(self, pins: list[str], name: str) -> tuple:
        path = self.folder / f"{name}.json"
        child = dataclasses.replace(self.settings, probe=path, pins=",".join(pins), fresh=False, progress=False,
                                    html=False, replay=False, max_runs=0, out=self.folder / "out")
        cmd = children.command_line("trace", child.to_argv())
        env = {**os.environ, "PYTHONHASHSEED": str(SEED)} if "hash" in pins else dict(os.environ)
        proc = children.start(cmd, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.running.append(proc)
        return proc, cmd, path

    def _probe(self, started: tuple, what: str) -> Probe:
        proc, cmd, path = started
        children.verdict(children.finish(proc, cmd), what)
        return store.load_probe(path)

    def own(self, bench, trace, restart) -> None:
        """This process's probe, from the bench of its experiment once its passes have run: the state at the training
        call (the snapshot every run starts from), the batches, and one more plain run from there (restored as a
        fresh process starts the step: the seeded random ops at their start)."""
        snapshot = bench.start
        saved = dict(zip(snapshot.keys, snapshot.saved))
        # in the order the step captures them, as the other process's probe has them (analysis/fresh.paired)
        initial = {k: saved[k] for k in trace.variables if k in saved and k not in restart.variables}
        batches = list(bench.feeder.run())
        snapshot.restore()
        variables = {k: v for k, v in trace.variables.items() if k in initial}
        self.mine = measured(bench.runner.call, initial, variables, batches, run=True)

    def checked(self, record: Record) -> Record:
        """The record with the check's facts, its sources and its verdict."""
        hash_seed = os.environ.get("PYTHONHASHSEED", "unset")
        script = self._script_runs(record)  # started before the probe is awaited: the two overlap
        try:
            other = self._probe(self.first, "the fresh-process check's second process")
        except children.ChildFailed as exc:
            if script:
                script.stopped()
            if exc.exit_code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
                raise
            failed = FreshCheck(hash_seed=hash_seed, init=[], batches=[], first_differing_step=None, steps=0,
                                error=str(exc))
            return dataclasses.replace(record, fresh=failed)
        check = decide.check(self.mine, other, record.default.first_differing_step(), hash_seed)
        if check.init or check.batches:
            check.cause = self.cause(bool(check.init))
            check.set_sites = decide.set_sites(self.settings.script) if "hash" in check.cause.sources else []
        if script and check.apart:  # found at the training call: the runs past it would add nothing
            script.stopped()
        elif script:
            check.script = script.compared(_run_command(self.settings))
        return merged(record, check)

    def _script_runs(self, record: Record):
        """The user's test past the call analysed, where this process found the step deterministic: two more fresh
        runs of a script that trains (not the target contract, whose step the probes compare)."""
        s = self.settings
        if record.facts.verdict.nondeterministic or not s.script_check or not record.meta.intercepted:
            if self.early is not None:
                self.early.stopped()
            return None
        if self.early is not None:
            return self.early
        from .usertest import UserTestRuns

        return UserTestRuns.started(s, self.folder, True, patch=s.patch, seed=s.seed)

    def cause(self, state_differs: bool):
        """Pairs of fresh probes, each pair with one set of sources pinned, until a pair agrees."""
        tried, agreed = [], []
        for pins in decide.candidates(state_differs):
            pair = [self._start(pins, f"{'-'.join(pins)}.{i}") for i in (1, 2)]  # side by side
            a, b = (self._probe(p, f"the fresh-process check's probe pinning {', '.join(pins)}") for p in pair)
            tried.append(pins)
            agreed.append(decide.agree(a, b))
            if agreed[-1]:
                break
        return decide.cause_of(tried, agreed)


def _run_command(settings) -> str:
    """What each of the script's two more runs was, as a command the user can run."""
    return run_command(str(settings.script), list(settings.script_args), {
        "--patch": settings.patch, "--seed": settings.seed, "--steps": settings.check_steps, "--at": settings.at})


def merged(record: Record, check: FreshCheck) -> Record:
    """The record with the check: its facts, its sources (ranked with the rest) and the verdict."""
    from ..analysis import facts
    from ..analysis.rank import rank

    where = record.meta.intercepted.get("where", "")
    remedy = decide.remedy(check.cause, check.created, check.set_sites)
    sources = rank(record.sources + decide.rows(check, where, remedy))
    verdict = facts.with_fresh_processes(record.facts.verdict, decide.evidence(check))
    return dataclasses.replace(record, fresh=check, sources=sources,
                               facts=dataclasses.replace(record.facts, verdict=verdict))


def measured(call, initial: dict, variables: dict, batches: list, run: bool) -> Probe:
    """A probe: digests of `initial` (key -> the value at the training call), of each batch's arguments, and where
    `run`, of every variable and the outputs after each step of `call` over the batches."""
    import tensorflow as tf

    def of(values) -> str:
        return combined({str(i): value_digest(v) for i, v in enumerate(values)})

    probe = Probe(initial={k: value_digest(v.numpy()) for k, v in initial.items()},
                  batches=[of(tf.nest.flatten(args)) for args in batches])
    for args in batches if run else []:
        out = call(args)
        probe.outputs.append(of(tf.nest.flatten(out, expand_composites=True)))
        probe.after.append(dict(zip(variables, of_variables(list(variables.values())))))
    return probe


def probe(settings) -> int:
    """In the child: run the script to its training call (the sources `settings.pins` names pinned, every variable's
    making recorded), digest what the step reads, run the step from there, and leave the probe file. No trace: the
    step's own concrete function and the variables it captures are all the comparison needs."""
    from ..patches.step import PatchedCallable
    from ..targets.creation import Creation
    from ..targets.loader import importable, load_target
    from ..targets.seeding import pinned, seeded
    from ..trace.trace import captured_variables, concrete_function
    from .prepared import TensorFlowSetup
    from .runner import Feeder

    pins = {p for p in settings.pins.split(",") if p}
    creation = Creation(settings.script)
    with importable(settings.script):
        tensorflow = TensorFlowSetup(settings.device)
        tfcompat.limit_mirrored_strategies(settings.replica_limit)  # a rung of --replicas, as its own process has it
        target = load_target(settings.script, tensorflow.watching(), *seeded(settings.seed), pinned(pins, SEED),
                             creation.recording(), options=settings)
        tensorflow.started()
        concrete = concrete_function(target, target.make_inputs())
        variables, _ = captured_variables(concrete)
        batches = list(Feeder(target, min(settings.steps, target.steps_available or settings.steps)).run())
        step = PatchedCallable(target.step, settings.patch, settings.script.stem) if settings.patch else concrete
        found = measured(lambda args: step(*args), variables, variables, batches, run=not pins)
    found.created, found.pins = creation.of(variables), sorted(pins)
    found.hash_seed = os.environ.get("PYTHONHASHSEED", "unset")
    store.save_probe(found, Path(settings.probe))
    return 0
