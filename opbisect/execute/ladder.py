"""The replica ladder (`--replicas 1,all`): the whole experiment once per rung, each in a fresh process whose
MirroredStrategy is limited to its first N devices (TensorFlow fixes its devices when it starts, and a strategy
cannot be remade smaller in place).

On GPUs with two replicas or more, the full rung runs again under each NCCL setting that changes how the
all-reduce sums (`NCCL_SETTINGS`), so the report can say whether the difference follows them.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from .processes import trace_in_child

# Each: the environment that makes NCCL sum in another way. Ring: a fixed ring order instead of the tree or
# NVLS algorithm NCCL picks per size; NVLS off: no reduction inside the NVLink switch (H100/H200 systems).
NCCL_SETTINGS = ({"NCCL_ALGO": "Ring"}, {"NCCL_NVLS_ENABLE": "0"})


@dataclasses.dataclass
class RungRun:
    """One rung as run: its replica limit (0: all), the environment it added, and the child's record."""

    limit: int
    env: dict[str, str]
    record: object


def run_ladder(settings, folder: Path, progress=print) -> list[RungRun]:
    """Each rung of `settings.replicas`, then the NCCL settings on the full rung where they apply."""
    done: list[RungRun] = []
    for limit in settings.replica_rungs():
        done.append(_rung(settings, folder / f"rung{len(done) + 1}", limit, {}, progress))
    full = next((r for r in done if r.limit == 0), None)
    if full is not None and full.record.meta.device.startswith("GPU") and full.record.meta.replicas > 1:
        for env in NCCL_SETTINGS:
            done.append(_rung(settings, folder / f"rung{len(done) + 1}", 0, env, progress))
    return done


def _rung(settings, out: Path, limit: int, extra: dict, progress) -> RungRun:
    # The fresh-process check once, on the rung the script runs as written (all replicas, no NCCL settings): the
    # other rungs ask about replicas, and their state at the training call is the full rung's.
    fresh = settings.fresh and limit == 0 and not extra
    child = dataclasses.replace(settings, replicas="", replica_limit=limit, out=out, progress=False, html=False,
                                fresh=fresh)
    what = describe(limit, extra)
    record = trace_in_child(child, {**os.environ, **extra}, f"the rung {what}")
    if settings.progress:
        progress(f"opbisect: rung {what} done ({record.meta.replicas} replica(s))")
    return RungRun(limit, extra, record)


def describe(limit: int, env: dict) -> str:
    where = "all replicas" if limit == 0 else f"{limit} replica{'s' if limit > 1 else ''}"
    return ", ".join([where] + [f"{k}={v}" for k, v in env.items()])
