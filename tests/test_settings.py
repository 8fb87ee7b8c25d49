"""An option a user gives `opbisect fix` reaches every child it starts: each trace round, the verify and the two runs of
the user's test. The children are started by command line, so the test reads back what each child would parse."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from opbisect import cli
from opbisect.execute import children
from opbisect.fix import driver as fix_driver
from opbisect.fix import plan as decide
from opbisect.record.fixing import Recommendation
from opbisect.settings import FixSettings, RunSettings, StepOptions, TraceSettings, VerifySettings


def _not_default(f: dataclasses.Field):
    """A value for option `f` that differs from its default, of the type its command line parses."""
    if f.metadata["choices"]:
        return next(c for c in reversed(f.metadata["choices"]) if c != f.default)
    if f.metadata["after_dashes"]:
        return ("--" + f.name,)
    if f.metadata["positional"]:
        return Path("given dir/script.py")
    if isinstance(f.default, bool):
        return not f.default
    if isinstance(f.default, int):
        return max(f.default, f.metadata["minimum"] or 0) + 3
    if isinstance(f.default, str):
        return "given_" + f.name
    if isinstance(f.default, Path):
        return Path("given dir") / f.name
    raise AssertionError(f"give {f.name} ({f.type}) a value in this test")


GIVEN = {f.name: _not_default(f) for f in dataclasses.fields(StepOptions)}


@pytest.mark.parametrize("kind", [TraceSettings, VerifySettings, FixSettings, RunSettings])
def test_every_option_of_every_command_survives_its_command_line(kind):
    """A child gets its settings by command line: each option set to a value other than its default comes back."""
    given = kind(**{f.name: _not_default(f) for f in dataclasses.fields(kind)})
    command = {TraceSettings: "trace", VerifySettings: "verify", FixSettings: "fix", RunSettings: "run"}[kind]
    again = kind.from_namespace(cli.parse([command, *given.to_argv()]))
    assert again == given
    assert all(getattr(again, f.name) != f.default for f in dataclasses.fields(kind) if not f.metadata["after_dashes"])


def _parsed(cmd: list[str]):
    """The settings a child started with `cmd` (python -m opbisect COMMAND ARGS) reads from its command line."""
    argv = cmd[cmd.index("opbisect") + 1:]
    kind = {"trace": TraceSettings, "verify": VerifySettings, "run": RunSettings}[argv[0]]
    return kind.from_namespace(cli.parse(argv))


def _reaches(settings, fields: list[str]) -> dict:
    """The fields among `fields` whose value in `settings` is not what the user gave fix."""
    return {name: getattr(settings, name) for name in fields if getattr(settings, name) != GIVEN[name]}


@pytest.fixture
def started(monkeypatch, tmp_path):
    """A fix driver whose children are not run: the command line of each is kept."""
    commands = []

    class Done(Exception):
        pass

    def run(cmd, env, tell=None):
        commands.append(cmd)
        raise Done

    def start(cmd, env, **kwargs):
        commands.append(cmd)
        return None

    monkeypatch.setattr(children, "run", run)
    monkeypatch.setattr(children, "run_telling", run)  # fix's verify, its progress said as it comes
    monkeypatch.setattr(children, "start", start)
    driver = fix_driver.FixDriver(FixSettings(**GIVEN, out=tmp_path), tmp_path / "staging", tmp_path / "final")
    return driver, commands, Done


def test_every_step_option_given_to_fix_reaches_each_trace_round(started):
    driver, commands, done = started
    plan = decide.RoundPlan(2, ops=("a",), seed="7")
    with pytest.raises(done):
        driver.trace_round(plan)
    assert _reaches(_parsed(commands[-1]), list(GIVEN)) == {}
    assert _parsed(commands[-1]).seed == "7"


def test_every_step_option_given_to_fix_reaches_its_verify(started):
    driver, commands, done = started
    with pytest.raises(done):
        driver.verify()
    common = [f.name for f in dataclasses.fields(VerifySettings) if f.name in GIVEN]
    assert _reaches(_parsed(commands[-1]), common) == {} and len(common) == len(GIVEN)


@pytest.mark.parametrize("intercepted", [True, False], ids=["script-run", "target-contract"])
def test_every_step_option_given_to_fix_reaches_both_runs_of_the_users_test(started, intercepted):
    from opbisect.execute.usertest import UserTestRuns

    driver, commands, _ = started
    rec = Recommendation(variant="patched", patch="patch.csv", seed="7")
    runs = UserTestRuns.started(driver.settings, driver.staging, intercepted, patch=rec.patch, seed=rec.seed)
    assert len(runs.runs) == 2 and len(commands) == 2
    for cmd in commands:
        settings = _parsed(cmd)
        common = [f.name for f in dataclasses.fields(settings) if f.name in GIVEN]
        assert _reaches(settings, common) == {} and settings.seed == "7"
        assert {"script", "script_args"} <= set(common)
