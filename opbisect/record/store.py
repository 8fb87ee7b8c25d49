"""Store: a report is one folder, `<out>/<script stem>/`, written as one unit.

The folder holds `record.json` (the record, the one data file) and the views made from it (`sources.csv`,
`summary.txt`, `report.json`, and `report.html` when asked). It is assembled in a hidden staging folder beside
it, created before the run starts (so an unusable --out fails at once, not after the run), and moved into place
with signals blocked: a reader sees the old report or the new one, never a new record beside an old CSV. A
report folder is never replaced by the report of another script with the same name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from ..errors import RecordError, ReportWriteError, UsageError, stop_if_came
from .model import RECORD_VERSION, Record

RECORD = "record.json"
SUMMARY_JSON = "report.json"
TEXT_SUFFIXES = {".txt", ".json", ".csv", ".html", ".py", ".md"}  # what a report holds that may name a path


def to_json(record: Record) -> dict:
    # The graph is networkx's node-link data, JSON values already: walking it (most of a large record) copies
    # nothing a writer needs (25k ops: 3.7 s of the record's 4 s).
    data = _plain(dataclasses.replace(record, graph={}))
    data["graph"] = record.graph
    return data


def _plain(value):
    """dataclasses.asdict without its deep copies: a record holds only dataclasses, lists, tuples, dicts and JSON
    scalars, so no leaf needs copying (for a record of 8.4k ops: asdict 1.0 s, this 0.4 s)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):  # kept a tuple, as asdict keeps it (JSON writes both as arrays)
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _record_file(path: Path) -> Path:
    return path / RECORD if path.is_dir() else path


def load(path: Path) -> Record:
    """Read and validate a record (a report folder or its record.json); RecordError says what is wrong."""
    path = Path(path)
    try:
        with open(_record_file(path), encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise RecordError(f"no such record: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"cannot read {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    except RecursionError:
        raise RecordError(f"{path} is not an opbisect record (nested too deeply)") from None
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path} is not an opbisect record (not JSON: {exc.msg}, line {exc.lineno})") from None
    return from_json(data, str(path))


def from_json(data, where: str = "the record") -> Record:
    import pydantic

    if not isinstance(data, dict):
        kind = {list: "an array", type(None): "null", str: "a string", bool: "a boolean"}.get(type(data), "a number")
        raise RecordError(f"{where} is not an opbisect record (JSON {kind}, not an object)")
    if data.get("version") != RECORD_VERSION:
        raise RecordError(f"{where} is not an opbisect record of version {RECORD_VERSION} "
                          f"(version {data.get('version')!r})")
    try:
        record = pydantic.TypeAdapter(Record).validate_python(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"])
        raise RecordError(f"{where} is not a valid opbisect record ({at}: {first['msg']})") from None
    except RecursionError:
        raise RecordError(f"{where} is not an opbisect record (nested too deeply)") from None
    _check_consistent(record, where)
    return record


def _check_consistent(record: Record, where: str) -> None:
    """What the types cannot say: the parts of a record that every view relies on."""
    problems = []
    if not record.analyses:
        problems.append("no step analysis")
    if record.default.runs < 2 or record.default.steps < 1:
        problems.append("fewer than 2 runs of the plain step")
    for a in record.analyses:
        if any(len(run) != len(a.instrumented.taps) for run in a.instrumented.fps):
            problems.append(f"step {a.step}: fingerprints do not match the taps")
    v = record.facts.verdict
    if v.exit_code != (1 if v.nondeterministic else 0):
        problems.append(f"its verdict says {'non' if v.nondeterministic else ''}deterministic but stores exit code "
                        f"{v.exit_code}")
    problems += _graph_problems(record.graph)
    if problems:
        raise RecordError(f"{where} is not a usable opbisect record ({'; '.join(problems)})")


def _graph_problems(graph) -> list[str]:
    """What makes a record's op graph unusable by the views: no ops, an op without its fields, an edge to an op
    the graph does not have."""
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    edges = graph.get("edges", []) if isinstance(graph, dict) else None
    if not isinstance(nodes, list) or not nodes or not isinstance(edges, list):
        return ["its op graph is empty or not a graph"]
    if not all(isinstance(n, dict) and {"id", "type", "outputs", "resources"} <= set(n) for n in nodes):
        return ["an op of its graph lacks its id, type, outputs or resources"]
    ids = {n["id"] for n in nodes}
    if not all(isinstance(e, dict) and e.get("source") in ids and e.get("target") in ids for e in edges):
        return ["an edge of its op graph names an op the graph does not have"]
    try:
        from ..ir.graph import OpGraph

        OpGraph.from_json(graph)
    except Exception as exc:  # noqa: BLE001 - any way the graph fails to load makes the record unusable
        return [f"its op graph does not load ({type(exc).__name__})"]
    return []


def save_probe(probe, path: Path) -> None:
    """A fresh-process probe (record.model.Probe), written whole or not at all."""
    partial = Path(f"{path}.{os.getpid()}.partial")
    try:
        partial.write_text(json.dumps(_plain(probe)))
        os.replace(partial, path)
    except OSError as exc:
        raise ReportWriteError(f"writing the probe {path} failed ({exc.strerror})") from None


def load_verification(path: Path):
    """verify's record (a verify report folder or its verification.json), validated."""
    from .verification import VERIFY_VERSION, Verification

    record = _validated(Verification, _named(path, VERIFY_RECORD), "an opbisect verify record")
    if record.version != VERIFY_VERSION:
        raise RecordError(f"{path} is a verify record of version {record.version}, not {VERIFY_VERSION}")
    return record


def load_fix(path: Path):
    """fix's record (a fix report folder or its fix.json), validated."""
    from .fixing import FIX_VERSION, Fix

    record = _validated(Fix, _named(path, FIX_RECORD), "an opbisect fix record")
    if record.version != FIX_VERSION:
        raise RecordError(f"{path} is a fix record of version {record.version}, not {FIX_VERSION}")
    return record


def _named(path: Path, name: str) -> Path:
    return Path(path) / name if Path(path).is_dir() else Path(path)


def load_probe(path: Path):
    """A fresh-process probe, validated; RecordError where it is not one."""
    from .model import Probe

    return _validated(Probe, path, "a fresh-process probe")


def _validated(kind, path: Path, what: str):
    import pydantic

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return pydantic.TypeAdapter(kind).validate_python(data)
    except FileNotFoundError:
        raise RecordError(f"no such file: {path} ({what})") from None
    except (OSError, ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
        raise RecordError(f"{path} is not {what} ({str(exc).splitlines()[0][:200]})") from None


def report_folder_of(path: Path) -> Path | None:
    """The report folder a record path names (the folder itself, or the folder of its record.json), or None for
    a record that lives elsewhere (a pipe, a file of another name)."""
    if path.is_dir():
        return path
    return path.parent if path.is_file() and path.name == RECORD else None


def reproducers_of(path: Path) -> dict[str, bytes]:
    """The reproducers of the report folder that holds `path`, by their path in the folder: a re-made report
    keeps them."""
    folder = report_folder_of(path)
    if folder is None or not (folder / "repro").is_dir():
        return {}
    return {f"repro/{p.name}": p.read_bytes() for p in sorted((folder / "repro").iterdir()) if p.is_file()}


VERIFY_RECORD, FIX_RECORD = "verification.json", "fix.json"  # the records of verify's and fix's report folders


def script_of(folder: Path) -> str | None:
    """The resolved script path a report folder belongs to (trace's, verify's or fix's), or None if it holds no
    opbisect report."""
    for name in (SUMMARY_JSON, FIX_RECORD, VERIFY_RECORD):
        try:
            with open(folder / name, encoding="utf-8") as fh:
                return json.load(fh)["script_path"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


@contextlib.contextmanager
def signals_held(take: bool = False):
    """Hold SIGINT and SIGTERM while a step that must not be cut runs: they are delivered after it, or with `take`
    not at all (the list yielded says which came). Python-level handlers, not a signal mask: a signal sent to the
    process goes to any thread that does not block it, and TensorFlow runs many."""
    came: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: came.append(signum)) for s in held}
    try:
        yield came
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if came and not take:
            signal.raise_signal(came[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _left_by_the_dead(folder: Path, pattern: str) -> list[Path]:
    """The entries of `folder` matching `pattern`, a regex whose group `pid` is the process that made them, where
    that process is gone (killed outright: SIGKILL)."""
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return []
    return [e for e in entries if (m := re.fullmatch(pattern, e.name)) and not _alive(int(m["pid"]))]


def remove_stale(folder: Path, pattern: str) -> None:
    """Remove what a process killed outright left in `folder` (`_left_by_the_dead`)."""
    for entry in _left_by_the_dead(folder, pattern):
        shutil.rmtree(entry, ignore_errors=True)


def _staged(stem: str) -> str:
    """The names of `stem`'s staged folders (`ReportFolder.prepare` makes them), group `pid` the process's id."""
    return rf"\.{re.escape(stem)}\.(?P<pid>\d+)\..*\.partial"


def moved_into(folder: Path, into: Path) -> None:
    """`folder` renamed to `into`, replacing what `into` held; signals held, so that `into` is one folder or the
    other, never half of each (a process killed in between leaves `.<into>.old-PID`, removed as stale)."""
    with signals_held():
        if into.exists():
            old = into.with_name(f"{into.name}.old-{os.getpid()}")
            os.rename(into, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(folder, into)


def dead_staging(out: Path, stem: str, holding: str) -> list[Path]:
    """The staged folders of `stem` in `out` whose process is gone (killed outright) and that hold the file
    `holding`, oldest first."""
    found = [e for e in _left_by_the_dead(out, _staged(stem)) if (e / holding).is_file()]
    return sorted(found, key=lambda e: (e / holding).stat().st_mtime)


@contextlib.contextmanager
def temporary(prefix: str):
    """A temporary folder for child processes' reports, named with this process's id; those of dead processes
    (killed outright) are removed first."""
    base = Path(tempfile.gettempdir())
    remove_stale(base, rf"{re.escape(prefix)}(?P<pid>\d+)-.*")
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-") as tmp:
        yield tmp


class ReportFolder:
    """`<out>/<stem>/`, staged before the run and committed as one unit."""

    def __init__(self, out: Path, stem: str, script_path: str | None = None):
        # absolute: a script may change the working directory while it loads
        self.out, self.stem, self.script_path = Path(out).absolute(), stem, script_path
        self.final = self.out / stem
        self.staging: Path | None = None
        self.interrupted = False  # a signal came while the report moved into place: it is complete all the same

    def prepare(self) -> "ReportFolder":
        """Check that the report can be written, before any run: UsageError if not."""
        if self.out.exists() and not self.out.is_dir():
            raise UsageError(f"--out {self.out} is a file, not a folder")
        if self.final.exists() or self.final.is_symlink():
            owner = script_of(self.final) if self.final.is_dir() else None
            if owner is None:
                raise UsageError(f"{self.final} exists and is not an opbisect report: remove it or pick another --out")
            if self.script_path and owner != self.script_path:
                raise UsageError(f"{self.final} holds the report of {owner}, not of {self.script_path}: pick "
                                 f"another --out (scripts with one name share a report folder name)")
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            stem = re.escape(self.stem)
            remove_stale(self.out, _staged(self.stem))
            remove_stale(self.out, rf"\.{stem}(\.resume)?\.old-(?P<pid>\d+)")  # a report's, a kept fix's
            self.staging = Path(tempfile.mkdtemp(prefix=f".{self.stem}.{os.getpid()}.", suffix=".partial",
                                                 dir=self.out))
            os.chmod(self.staging, 0o777 & ~_umask())
        except OSError as exc:
            raise UsageError(f"--out {self.out} cannot hold the report ({exc.strerror})") from None
        return self

    def write(self, name: str, content: str | bytes) -> None:
        mode = "wb" if isinstance(content, bytes) else "w"
        try:
            (self.staging / name).parent.mkdir(parents=True, exist_ok=True)
            with open(self.staging / name, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as fh:
                fh.write(content)
        except OSError as exc:
            raise ReportWriteError(f"writing the report into {self.out} failed ({exc.strerror}); nothing was "
                                   f"replaced") from None

    def point_at_final(self) -> None:
        """Reports that child runs wrote inside this staged one name the staging folder (their --patch and --out
        paths); their text files name the final folder instead, so that every path in the committed report holds."""
        self.renamed(self.staging, self.final)

    def renamed(self, old: Path, new: Path) -> None:
        """The staged text files that name `old` name `new` instead."""
        before, after = os.fsencode(old), os.fsencode(new)
        for path in self.staging.rglob("*"):
            if path.suffix not in TEXT_SUFFIXES or not path.is_file():
                continue
            content = path.read_bytes()
            if before in content:
                self.write(str(path.relative_to(self.staging)), content.replace(before, after))

    def keep(self, into: Path) -> None:
        """The staged folder moved to `into` rather than removed (what a stopped fix had finished), replacing what
        `into` held."""
        moved_into(self.staging, into)
        self.staging = None

    def commit(self) -> Path:
        """Move the staged report into place and remove the one it replaces, signals held throughout; a signal
        that came meanwhile is taken (`interrupted`): the report is complete, and the caller says so."""
        stop_if_came()  # one whose exception was dropped: no report where the user stopped the run
        old = self.out / f".{self.stem}.old-{os.getpid()}"
        try:
            with signals_held(take=True) as came:
                if self.final.exists():
                    os.rename(self.final, old)
                os.rename(self.staging, self.final)
                self.staging = None
                failed = []
                shutil.rmtree(old, onerror=lambda *args: failed.append(args[2][1])) if old.exists() else None
                if failed:
                    print(f"opbisect: warning: the previous report, moved to {old}, could not be removed "
                          f"({failed[0]}): remove it by hand", file=sys.stderr)
            self.interrupted = bool(came)
            if self.interrupted:
                print(f"opbisect: a signal came while the report moved into place; it is complete "
                      f"({self.final}), and the exit code is its result", file=sys.stderr)
        except OSError as exc:
            raise ReportWriteError(f"moving the report into {self.final} failed ({exc.strerror})") from None
        return self.final

    def discard(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None

    def __enter__(self) -> "ReportFolder":
        return self.prepare() if self.staging is None else self

    def __exit__(self, *exc) -> None:
        self.discard()


def json_number(value: float | None):
    """NaN and infinities are not JSON: None and strings instead."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value
