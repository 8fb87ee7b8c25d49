"""The record of `opbisect fix`: each trace round, why the rounds ended, the final verify's decision, and the lines
a training script needs to keep the fix. Plain dataclasses; the decisions are made once, by opbisect.rounds."""

from __future__ import annotations

import dataclasses

from ..errors import EXIT_CLEAN, EXIT_FOUND

FIX_VERSION = 1
AS_WRITTEN = "as written"  # the recommendation where the step was reproducible before any patch


@dataclasses.dataclass
class Round:
    number: int  # 1-based
    exit_code: int  # the trace's verdict on the step as this round ran it: 0 reproducible, 1 not
    switches: list[str]  # family switches set for it (environment variables)
    patched: list[str]  # ops it traced already replaced
    sources: list[str]  # the sources it named, ranked
    new: list[str]  # those no earlier round named: what the next round patches
    seconds: float
    report: str  # its report folder, relative to the fix folder
    runs: int = 0  # runs of each of its passes: more than fix's --runs where it looked harder (0: not recorded)


@dataclasses.dataclass
class Fix:
    script: str
    script_path: str
    form: str  # the target form (step, keras, fit): what `opbisect.deterministic` is given
    rounds: list[Round]
    stopped: str  # why the rounds ended
    switches: list[str]  # the family switches the patched ops with no rewrite need
    verify: str = ""  # the verify report folder, relative to the fix folder ("" where none ran)
    recommendation: str = ""  # verify's, or AS_WRITTEN; "" when no variant was bitwise reproducible
    recommended_ratio: float | None = None  # its cost against the plain step
    lines: list[str] = dataclasses.field(default_factory=list)  # what to put in the training script
    version: int = FIX_VERSION

    @property
    def exit_code(self) -> int:
        """0 iff the recommended configuration is bitwise reproducible (git bisect: good), else 1."""
        return EXIT_CLEAN if self.recommendation else EXIT_FOUND
