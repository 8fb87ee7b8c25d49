"""Fresh processes: the whole experiment in P child processes, each `opbisect trace` with the same settings.

Each child gets its own PYTHONHASHSEED (1..P) unless the environment sets one, so hash-order effects show and
the experiment repeats. The children keep the protocol of execute/children.py.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ..record import store
from . import children


def run_children(settings, folder: Path, progress=print) -> tuple[list, list[str]]:
    """Run the experiment in `settings.processes` fresh processes; their records and hash seeds."""
    records, seeds = [], []
    for i in range(settings.processes):
        env = dict(os.environ)
        env.setdefault("PYTHONHASHSEED", str(i + 1))
        seeds.append(env["PYTHONHASHSEED"])
        # Process 1's fresh-process check names the variables that start apart and their cause; the other
        # processes would only repeat it.
        child = dataclasses.replace(settings, processes=1, out=folder / f"process{i + 1}", progress=False, html=False,
                                    fresh=settings.fresh and i == 0)
        records.append(trace_in_child(child, env, f"process {i + 1} of {settings.processes}"))
        if settings.progress:
            progress(f"opbisect: process {i + 1}/{settings.processes} done (PYTHONHASHSEED={seeds[-1]})")
    return records, seeds


def trace_in_child(child, env: dict, what: str):
    """`opbisect trace` with the child's settings in a fresh process: its record. A child that could not give a
    verdict raises what its exit code names (execute/children.py), never a verdict."""
    done = children.run(children.command_line("trace", child.to_argv()), env)
    children.verdict(done, what)
    return store.load(child.out / child.script.stem)
