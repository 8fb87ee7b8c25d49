"""The record of `opbisect fix`: each round (a trace in a fresh process, its own record beside), why the rounds ended,
verify's decision, what the fix recommends (a configuration, as data), and the user's own test run on it: two fresh
runs of the script with the recommendation applied. Plain dataclasses; the decisions are made once, by opbisect.fix.
"""

from __future__ import annotations

import dataclasses
import re
import shlex

from ..errors import EXIT_CLEAN, EXIT_FOUND
from .model import UserTest  # noqa: F401  (a fix's record holds it; trace's does too)
from .verification import XLA_FLAGS

FIX_VERSION = 4  # 2: the user's test, the recommendation as data, each round's seed and environment; 3: `refuted`;
# 4: a round's `kept`, `checked_on`
AS_WRITTEN = "as written"  # the recommendation where the script was reproducible before any change
SEEDED = "seeded"  # where seeding alone (the seed, PYTHONHASHSEED) made it reproducible


@dataclasses.dataclass
class Round:
    number: int  # 1-based
    exit_code: int  # the trace's verdict on the script as this round ran it: 0 reproducible, 1 not
    switches: list[str]  # environment variables set for it (family switches, PYTHONHASHSEED, ...), NAME=value
    patched: list[str]  # ops it traced already replaced
    sources: list[str]  # the sources it named, ranked
    new: list[str]  # those no earlier round named
    seconds: float
    report: str  # its report folder, relative to the fix folder
    runs: int = 0  # runs of each of its passes: more than fix's --runs where it looked harder (0: not recorded)
    seed: str = ""  # the seed it pinned (`trace --seed`), "" for none
    looked_harder: str = ""  # why it ran its passes again with --max-runs runs ("" where it did not)
    cause: list[str] = dataclasses.field(default_factory=list)  # its fresh-process check's cause (ir/randomness.py)
    kept: bool = False  # finished by a stopped fix and taken back by `fix --resume` (its seconds were spent then)


@dataclasses.dataclass
class Recommendation:
    """A configuration of the user's script: what `opbisect run` applies, and what the script would need to keep."""

    variant: str  # verify's variant (patched, global switch, ...), or AS_WRITTEN, or SEEDED
    patch: str = ""  # the fix's patch.csv, "" where nothing is patched
    seed: str = ""  # keras.utils.set_random_seed's seed, "" where none is needed
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # set before Python starts
    ratio: float | None = None  # the step's cost against the plain step, by verify
    unlike_plain: bool = False  # that ratio's step updated other variables than the plain step's (a skipped update)
    at: str = ""  # the training call the patch was made for (fix --at), "" for the first

    def command(self, script: str, args: list[str]) -> str:
        """The `opbisect run` command line that applies it."""
        return run_command(script, args, {"--patch": self.patch, "--seed": self.seed,
                                          "--at": self.at if self.patch else ""}, self.env)


def run_command(script: str, args, flags: dict, env: dict | None = None) -> str:
    """An `opbisect run` command line, as a user types it: the environment first, then the flags given a value
    ({"--patch": csv, "--steps": 10, ...}, in that order; an empty one left out)."""
    given = [str(part) for flag, value in flags.items() if value for part in (flag, value)]
    tail = ["--", *args] if args else []
    return " ".join([*(_assignment(k, v) for k, v in sorted((env or {}).items())),
                     shlex.join(["opbisect", "run", *given, script, *tail])])


def _assignment(name: str, value: str) -> str:
    """NAME=value for a shell (the name unquoted: a quoted NAME=value is a command's name); XLA_FLAGS as the shell's
    own value, where it has one, with `value` after it."""
    if name != XLA_FLAGS:
        return f"{name}={shlex.quote(value)}"
    users = f"${{{name}:+${name} }}"  # the user's flags and a space, where they have any
    if re.fullmatch(r"[\w\-=.,:/+ ]+", value):  # XLA's --name=value flags: nothing a shell reads in double quotes
        return f'{name}="{users}{value}"'
    return f'{name}="{users}"{shlex.quote(value)}'


@dataclasses.dataclass
class Refuted:
    """A configuration verify found reproducible in one process whose two fresh runs still differed: the user's test
    passed it over for the next."""

    recommendation: Recommendation
    test: UserTest


@dataclasses.dataclass
class Fix:
    script: str
    script_path: str
    form: str  # the target form (step, keras, fit): what `opbisect.deterministic` is given
    rounds: list[Round]
    stopped: str  # why the rounds ended (fix.plan.Stop's name)
    why: str  # the same, in words
    switches: list[str]  # the family switches the patched ops with no rewrite need
    verify: str = ""  # the verify report folder, relative to the fix folder ("" where none ran)
    recommendation: Recommendation | None = None  # None: no configuration to recommend
    lines: list[str] = dataclasses.field(default_factory=list)  # what to put in the training script
    test: UserTest | None = None  # the user's test on the recommendation
    refuted: list[Refuted] = dataclasses.field(default_factory=list)  # tried before it, in order, and refuted
    script_args: list[str] = dataclasses.field(default_factory=list)
    out: str = ""  # the --out it was written under (the fix of another call goes beside it)
    checked_on: dict[str, str] = dataclasses.field(default_factory=dict)  # {"tensorflow": version, "device": ...}
    version: int = FIX_VERSION

    @property
    def exit_code(self) -> int:
        """0 iff a configuration is recommended and two fresh runs of the script with it agree bit for bit (git
        bisect: good), else 1."""
        return EXIT_CLEAN if self.recommendation and self.test and self.test.agreed else EXIT_FOUND
