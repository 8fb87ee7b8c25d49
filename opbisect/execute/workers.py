"""`--workers N`: the experiment as the N workers of a MultiWorkerMirroredStrategy, one process each on this machine.

Every step call of one worker is matched by a call of every other: its collectives wait for their peers. So the
workers must call the step the same number of times in the same order, although each decides from its own results
(run a pinned pass? a magnitude pass? look harder?). Each such decision goes through an `Agreement`: every worker
writes its wish to a shared folder, waits for the others' and takes the same answer (any worker's wish to run more
is everyone's). A worker that asked nothing of a pass still runs it and keeps nothing from it.

    parent                              worker i (a child `opbisect trace`, TF_CONFIG task i)
    run_workers ── start N at once ──>  _experiment: ... agree.any("magnitude pass", bool(full)) ...
                <── N records ───────   (files <agree_dir>/<decision>.<i>)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from ..errors import CannotTest, InternalError
from ..record import store
from . import children

WAIT_SECONDS = 600.0  # for the other workers at one decision: longer than any pass between two decisions


class Agreement:
    """The decisions that add step calls, taken by all workers together (one worker: its own)."""

    def __init__(self, folder: Path | None = None, index: int = 0, count: int = 1, wait: float = WAIT_SECONDS):
        self.folder, self.index, self.count, self.wait = folder, index, count, wait
        self.decisions = 0

    @classmethod
    def of(cls, settings) -> "Agreement":
        if settings.workers > 1 and settings.agree_dir != Path():
            return cls(Path(settings.agree_dir), settings.worker_index, settings.workers)
        return cls()

    def any(self, what: str, wish: bool) -> bool:
        """True when any worker wishes it."""
        if self.count == 1:
            return wish
        self.decisions += 1
        mine = self.folder / f"{self.decisions:04d}.{self.index}"
        (self.folder / f".{mine.name}").write_text(json.dumps({"what": what, "wish": wish}))
        os.replace(self.folder / f".{mine.name}", mine)  # whole, or not there
        wishes = [json.loads(p.read_text()) for p in self._others(self.decisions)]
        if any(w["what"] != what for w in wishes):
            raise InternalError(f"the workers' decisions came apart at decision {self.decisions}: "
                                f"{sorted({w['what'] for w in wishes})}")
        return any(w["wish"] for w in wishes)

    def all(self, what: str, wish: bool) -> bool:
        """True when every worker wishes it."""
        return not self.any(f"not {what}", not wish)

    def _others(self, n: int) -> list[Path]:
        paths = [self.folder / f"{n:04d}.{i}" for i in range(self.count)]
        deadline = time.monotonic() + self.wait
        while not all(p.exists() for p in paths):
            if time.monotonic() > deadline:
                missing = [i for i, p in enumerate(paths) if not p.exists()]
                raise CannotTest(f"worker(s) {missing} did not reach decision {n} in {self.wait:.0f} s")
            time.sleep(0.02)
        return paths


def tf_configs(count: int) -> list[str]:
    """TF_CONFIG of each of `count` workers on this machine, each on a port free when asked."""
    ports = []
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
        ports.append(s.getsockname()[1])
    for s in sockets:
        s.close()
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    return [json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}) for i in range(count)]


def gpu_shares(gpus: int, workers: int) -> list[str]:
    """CUDA_VISIBLE_DEVICES of each worker: the machine's GPUs split evenly, in order (each TensorFlow process
    takes the memory of every GPU it sees); none where there are fewer GPUs than workers."""
    if gpus < workers:
        return []
    per = gpus // workers
    return [",".join(str(g) for g in range(i * per, (i + 1) * per)) for i in range(workers)]


@functools.cache
def machine_gpus() -> tuple[str, ...]:
    """The machine's NVIDIA GPUs by model, without importing TensorFlow here (nvidia-smi; none where there is none):
    the workers' shares of them, and what a fix's kept rounds ran on (fix/resume.py)."""
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ()
    if done.returncode != 0:
        return ()
    # a line a GPU: "GPU 0: NVIDIA H200 (UUID: GPU-...)"
    return tuple(line.split(": ", 1)[1].split(" (UUID")[0] for line in done.stdout.splitlines()
                 if line.startswith("GPU "))


def run_workers(settings, folder: Path, progress=print) -> list:
    """The experiment in `settings.workers` worker processes started together; their records, by task index."""
    agree_dir = folder / "agree"
    agree_dir.mkdir(parents=True)
    procs = []
    shares = [] if "CUDA_VISIBLE_DEVICES" in os.environ else gpu_shares(len(machine_gpus()), settings.workers)
    try:
        for i, config in enumerate(tf_configs(settings.workers)):
            child = dataclasses.replace(settings, worker_index=i, agree_dir=agree_dir, out=folder / f"worker{i}",
                                        progress=False, html=False)
            env = {**os.environ, "TF_CONFIG": config, **({"CUDA_VISIBLE_DEVICES": shares[i]} if shares else {})}
            env.setdefault("PYTHONHASHSEED", "0")  # the same program in every worker: the same op names
            log = open(folder / f"worker{i}.log", "w")
            procs.append((child, log, children.start(children.command_line("trace", child.to_argv()), env,
                                                     stdout=log, stderr=subprocess.STDOUT)))
        _wait_all([p for _, _, p in procs], folder)
    finally:
        for _, log, proc in procs:
            if proc.poll() is None:
                _end(proc)
            log.close()
    if settings.progress:
        progress(f"opbisect: {settings.workers} workers done")
    return [store.load(child.out / child.script.stem) for child, _, _ in procs]


def _wait_all(procs: list, folder: Path, wait: float = WAIT_SECONDS) -> None:
    """Until every worker has ended. The first that ends without a verdict ends the others (their collectives
    would wait for it forever) and raises the error its exit code names; so does a worker still running `wait`
    seconds after another gave its verdict (the same schedule runs in each: it waits in a collective)."""
    first_done = None
    while True:
        for i, p in enumerate(procs):
            if p.poll() not in (None, *children.VERDICTS):
                raise children.failure(p.returncode, (folder / f"worker{i}.log").read_text(),
                                       f"worker {i} of {len(procs)}")
        running = [i for i, p in enumerate(procs) if p.poll() is None]
        if not running:
            return
        if len(running) < len(procs):
            first_done = first_done or time.monotonic()
            if time.monotonic() - first_done > wait:
                raise CannotTest(f"worker(s) {running} still ran {wait:.0f} s after another had finished: their "
                                 f"step calls no longer matched (a collective waits for a peer that has gone)")
        time.sleep(0.05)


def _end(proc, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds: a worker blocked in a collective never runs its Python signal
    handler."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
