"""A stopped fix keeps what it finished, and `opbisect fix ... --resume` goes on from there.

A fix of a large model runs for many minutes (BERT-base under mixed precision on an H100: rounds of 2-3 minutes,
then verify for over 10), and a Ctrl-C, a lost terminal or a child that failed used to lose all of it. The report
folder stays whole or absent (the contract), so what a stopped fix finished is kept beside it, in
`<out>/.<stem>-fix.resume/`: the finished rounds' reports, verify's where it finished, and `state.json`, which says
which those are and what they ran from (their key). A fix given --resume copies them back where the key is the same
and runs only what is left. Each kept round's record goes through the same decision as a round just run, so the
patch and the next round come out as before. The user's test always runs again: it is the verdict.

    Kept(folder).adopt()        before the staged folder is made: where a fix of the script was killed outright
                                (SIGKILL, the OOM killer, a machine taken back), its staged folder, which holds
                                state.json as of its last finished round, becomes the kept one
    Kept(folder).told()         a fix without --resume: one line where a stopped fix of the script left rounds
    Kept(folder).restore(drv)   --resume: what still holds copied into the staged folder, its paths renamed
    Kept(folder).note(driver)   after each finished round and verify: state.json into the staged folder
    Kept(folder).save(drv)      at a stop: the last checkpoint, and the staged folder moves to the kept one
    Kept(folder).remove()       the fix ended with a report: nothing left to resume (state.json left out of it)
    key(settings)               what a child's result depends on that opbisect can see
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from .. import __version__, tfcompat
from ..errors import OpbisectError
from ..execute.workers import machine_gpus
from ..record import store
from ..record.fixing import Round
from ..settings import Settings
from ..words import listed
from .plan import RoundPlan

STATE, STATE_VERSION = "state.json", 1
# the environment a round's child reads, by prefix: TensorFlow, XLA, CUDA, Keras, Python, opbisect, Hugging Face
ENVIRONMENT = ("TF_", "XLA_", "CUDA_", "NVIDIA_", "KERAS", "PYTHON", "OPBISECT_", "HF_", "TRANSFORMERS_", "OMP_",
               "LD_LIBRARY_PATH")
WHAT = {"script": "the script changed", "options": "the options differ", "tensorflow": "TensorFlow's version changed",
        "gpus": "the GPUs differ", "opbisect": "opbisect's version changed", "python": "the Python interpreter differs",
        "directory": "the working directory differs"}


def key(settings: Settings) -> dict:
    """What a child run with `settings` gives depends on that opbisect can see: its options (but for its --out and
    --patch, paths inside one fix), the script's bytes, TensorFlow's and opbisect's versions, the interpreter, the
    working directory, the environment that TensorFlow, XLA, CUDA, Keras and Python read, and the machine's GPUs (a
    round's sources are its card's kernels': a fix stopped on one machine and resumed on another with other cards
    starts over; a list, as the kept key's JSON reads back). Not the modules and data files the script reads: a
    user who changed those starts over (the fix's --resume says so in its help)."""
    options = dataclasses.replace(settings, out=Path(), **({"patch": ""} if hasattr(settings, "patch") else {}))
    return {"script": hashlib.sha256(Path(settings.script).read_bytes()).hexdigest(), "options": options.to_argv(),
            "tensorflow": tfcompat.installed_tensorflow(), "gpus": list(machine_gpus()), "opbisect": __version__,
            "python": sys.executable, "directory": os.getcwd(),
            "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENVIRONMENT)}}


def changed(kept: dict, now: dict) -> str:
    """What differs between two keys, in words ("" for nothing). A part the kept key lacks (one an older opbisect
    wrote) is taken as unchanged."""
    for part, words in WHAT.items():
        if kept.get(part, now.get(part)) != now.get(part):
            return words
    names = sorted(set(kept.get("environment", {}).items()) ^ set(now.get("environment", {}).items()))
    return f"the environment differs ({listed(sorted({name for name, _ in names}))})" if names else ""


@dataclasses.dataclass
class State:
    staging: str  # the staged folder the kept reports were written in: the paths in them name it
    rounds_key: dict
    rounds: list[dict]  # the finished rounds (record.fixing.Round), in order
    verify_key: dict | None = None  # None: verify had not finished
    version: int = STATE_VERSION


class Kept:
    def __init__(self, folder: store.ReportFolder):
        self.folder = folder
        self.path = folder.out / f".{folder.stem}.resume"

    def state(self) -> State | None:
        """The kept state, or None where there is none this opbisect can read."""
        try:
            state = State(**json.loads((self.path / STATE).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None
        return state if state.version == STATE_VERSION else None

    def told(self) -> str:
        state = self.state()
        if state is None:
            return ""
        return (f"a stopped fix of this script kept {len(state.rounds)} round(s) in {self.path}: --resume takes "
                f"them (this fix starts over, and replaces them if it is stopped too)")

    def restore(self, driver) -> str:
        """Copy what still holds into the driver's staged folder and hand it to the driver; the line to say."""
        state = self.state()
        if state is None:
            return f"--resume: no stopped fix of this script is kept in {self.folder.out}: from round 1"
        why = changed(state.rounds_key, key(driver.round_settings(RoundPlan(1))))
        if why:
            return f"--resume: the stopped fix's rounds are not taken, {why} since: from round 1"
        rounds = [Round(**r) for r in state.rounds]
        verified = state.verify_key is not None and not changed(state.verify_key, key(driver.verify_settings()))
        for name in [f"round{r.number}" for r in rounds] + (["verify"] if verified else []):
            shutil.copytree(self.path / name, self.folder.staging / name)
        self.folder.renamed(Path(state.staging), self.folder.staging)
        driver.kept, driver.kept_verify = {r.number: r for r in rounds}, verified
        and_verify = ", and its verify" if verified else ""
        return f"--resume: {len(rounds)} round(s) kept from the stopped fix{and_verify}: going on from there"

    def checkpoint(self, driver) -> None:
        """state.json in the staged folder, as of the rounds (and verify) finished so far: what a fix killed outright
        leaves for `adopt`. Written whole, then renamed over the last one."""
        verify_key = key(driver.verify_settings()) if driver.verified else None
        state = State(str(self.folder.staging), key(driver.round_settings(RoundPlan(1))),
                      [dataclasses.asdict(r) for r in driver.rounds], verify_key)
        self.folder.write(f"{STATE}.new", json.dumps(dataclasses.asdict(state), indent=1))
        os.replace(self.folder.staging / f"{STATE}.new", self.folder.staging / STATE)

    def note(self, driver) -> None:
        """`checkpoint` after a round, where it can be written: where not, the fix goes on (its report comes as
        before; only a kill would find nothing kept, and a stop says so)."""
        try:
            self.checkpoint(driver)
        except (OSError, OpbisectError):
            pass

    def save(self, driver) -> str:
        """At a stop, where a round finished: the staged folder becomes the kept one; the line to say ("" where
        nothing was kept)."""
        if not driver.rounds or self.folder.staging is None:
            return ""
        try:  # the stop's own exit stands: a fix that cannot keep its rounds says so and keeps none
            self.checkpoint(driver)
            self.folder.keep(self.path)
        except (OSError, OpbisectError) as exc:
            return f"the fix's finished rounds could not be kept ({exc})"
        done = f"{len(driver.rounds)} finished round(s)" + (" and its verify" if driver.verified else "")
        return f"the fix's {done} are kept in {self.path}: the same command with --resume goes on from there"

    def adopt(self) -> str:
        """Where a fix of this script in this --out was killed outright after a round finished, its staged folder
        becomes the kept one, unless the kept one is newer; the line to say ("" where none was adopted)."""
        dead = store.dead_staging(self.folder.out, self.folder.stem, STATE)
        kept = self.path / STATE
        if not dead or (kept.is_file() and kept.stat().st_mtime >= (dead[-1] / STATE).stat().st_mtime):
            return ""
        store.moved_into(dead[-1], self.path)
        state = self.state()
        rounds = len(state.rounds) if state else 0
        return f"a fix of this script was killed after {rounds} finished round(s): they are kept in {self.path}"

    def drop_checkpoint(self) -> None:
        """The report is about to be written: state.json is no part of it."""
        (self.folder.staging / STATE).unlink(missing_ok=True)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
