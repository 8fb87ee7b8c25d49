"""Zero edits: run the user's training script as `python train.py ARGS` would, and stop it at its first training call.

    run_to_training(runner, at, steps)
      hooks: Keras 3 and tf_keras Model.make_train_function (what fit and train_on_batch call), and tf.function's
             __call__ (a custom loop's step: a function that computes gradients and writes variables), each
             attached once the script has imported that module (targets/imports.py)
      runner.run(...)                  targets/script.py: the script as `python path argv...` runs it
      the chosen call raises Intercepted (a BaseException: the script's own `except Exception` lets it through),
      carrying what the analysis needs; the script's training does not run on

What is taken at the intercept (and the state is left as it was then):
- fit / train_on_batch: the model, and the next `steps` batches of the very iterator fit would feed (its shuffle,
  batching and distribution included), pulled without training on them;
- a custom loop's step: the function and its arguments; with `steps` K > 1, the script's own next K - 1 calls run
  (their arguments recorded), then the state is put back to what it was at the first one.

The target contract (a module defining `step` and `inputs`, or `model` and `data`/`fit_kwargs`) is unchanged:
`defines_contract` tells the two apart without running the script.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .. import tfcompat
from ..errors import TargetError, UsageError
from .script import ScriptStop

GRADIENT_MARKS = ("gradient_tape/", "gradients/")  # name scopes of the ops tf.GradientTape and tf.gradients make
WRITES = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "ResourceApply", "ResourceSparseApply",
          "ResourceScatter")


@dataclasses.dataclass(frozen=True)
class Point:
    """Where to stop: the N-th Keras training call (fit or train_on_batch), the N-th call of a training step, or
    the first call of the tf.function named `name`; by default the first training call of either kind."""

    kind: str = "any"  # any | fit | call | step
    index: int = 1
    name: str = ""

    def is_fit(self, fits: int) -> bool:
        """Whether the `fits`-th Keras training call is the point."""
        return self.kind == "any" or (self.kind == "fit" and fits == self.index)

    def is_call(self, calls: int, name: str) -> bool:
        """Whether the `calls`-th call of a training step, of the tf.function `name`, is the point."""
        return (self.kind == "any" or (self.kind == "call" and calls == self.index)
                or (self.kind == "step" and name == self.name))

    @classmethod
    def parse(cls, spec: str) -> "Point":
        if not spec:
            return cls()
        kind, _, value = spec.partition(":")
        if kind in ("fit", "call") and value.isdigit() and int(value) >= 1:
            return cls(kind, int(value))
        if kind == "step" and value:
            return cls("step", 1, value)
        raise UsageError(f"--at takes fit:N, call:N or step:NAME (got {spec!r})")


@dataclasses.dataclass
class TrainingCalls:
    """The script's training calls as `--at` counts them: each Keras fit or train_on_batch (each make_train_function
    call) and each call of a training step. One counter for the intercept and for `opbisect run`, so the call a
    trace analysed is the call run digests from."""

    at: Point
    fits: int = 0
    calls: int = 0

    def fit(self) -> bool:
        """A Keras training call begins: whether it is the point."""
        self.fits += 1
        return self.at.is_fit(self.fits)

    def call(self, name: str) -> bool:
        """A training step is called (the tf.function `name`): whether it is the point."""
        self.calls += 1
        return self.at.is_call(self.calls, name)


@dataclasses.dataclass
class Caught:
    """What the intercept took."""

    kind: str  # "fit" or "step"
    where: str  # file:line of the call in the script
    seconds: float  # how long the script ran before it
    output: str  # what the script printed before it
    model: Any = None  # fit: the Keras model
    batches: list = dataclasses.field(default_factory=list)  # fit: the batches fit would train on next
    function: Any = None  # step: the tf.function
    calls: list = dataclasses.field(default_factory=list)  # step: the arguments of each call taken
    name: str = ""  # the function's or the model's name


class Intercepted(ScriptStop):
    def __init__(self, caught: Caught):
        super().__init__(caught.kind)
        self.caught = caught


def defined_names(path: Path) -> set[str] | None:
    """The names a script binds at its top level (inside `if`, `with`, `try` and loops too, not in functions or
    classes), read from its source; None where it does not parse."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    names, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        todo.extend(ast.iter_child_nodes(node))
    return names


def has_contract(names: dict, step_name: str, inputs_name: str) -> bool:
    """Whether `names` hold the target contract: `step` and `inputs` (as named), or `model` with `data` or
    `fit_kwargs`."""
    return {step_name, inputs_name} <= set(names) or ("model" in names and bool({"data", "fit_kwargs"} & set(names)))


def defines_contract(path: Path, step_name: str = "step", inputs_name: str = "inputs") -> bool:
    """Whether the script defines the target contract at its top level (read, not run): `step` and `inputs`, or
    `model` with `data` or `fit_kwargs`. A source that does not parse goes to the loader, which says why."""

    names = defined_names(path)
    return True if names is None else has_contract(dict.fromkeys(names), step_name, inputs_name)


class _Hooks:
    """The training calls, counted; the chosen one raises Intercepted."""

    def __init__(self, path: Path, at: Point, steps: int, started: float, output: io.StringIO):
        self.path, self.at, self.steps, self.started, self.output = Path(path).resolve(), at, steps, started, output
        self.counted = TrainingCalls(at)
        self.judged: dict[int, bool] = {}  # id(tf.function) -> whether it is a training step
        self.taking: Caught | None = None  # a custom loop's step while its next calls are recorded
        self.saved: list = []  # the state at the first call taken: (variable, value)

    def where(self) -> str:
        for frame in reversed(traceback.extract_stack()):
            if Path(frame.filename).resolve() == self.path:
                return f"{Path(frame.filename).name}:{frame.lineno}"
        return ""

    def caught(self, kind: str, **parts) -> Caught:
        return Caught(kind=kind, where=self.where(), seconds=round(time.time() - self.started, 2),
                      output=self.output.getvalue(), **parts)

    # -- Keras: fit and train_on_batch each call make_train_function, then the train function on an iterator -----
    def make_train_function(self, model, make, args, kwargs):
        made = make(model, *args, **kwargs)  # Keras 2 returns it, Keras 3 only sets model.train_function
        instead = self.train_function(model)
        if instead is None:
            return made
        model.train_function = instead
        return instead

    def train_function(self, model):
        """The train function to run in place of the model's on this fit or train_on_batch call, or None."""
        if not self.counted.fit():
            return None

        def first_call(iterator, *rest):
            raise Intercepted(self.caught("fit", model=model, batches=_take(iterator, self.steps),
                                          name=type(model).__name__))

        return first_call

    # -- a custom loop: a tf.function that computes gradients and writes variables -------------------------------
    def step_call(self, function, args, kwargs, call):
        import tensorflow as tf

        if not tf.executing_eagerly():  # inside another function's trace: not a call of the loop's
            return call()
        if self.taking is not None:
            self.taking.calls.append((args, kwargs))
            if len(self.taking.calls) == self.steps:
                _put_back(self.saved)
                raise Intercepted(self.taking)
            return call()
        if not self._is_training_step(function, args, kwargs):
            return call()
        name = function_name(function)
        if not self.counted.call(name):
            return call()
        caught = self.caught("step", function=function, calls=[(args, kwargs)], name=name)
        if self.steps == 1:
            raise Intercepted(caught)
        self.taking, self.saved = caught, _state_of(function, args, kwargs)
        return call()

    def _is_training_step(self, function, args, kwargs) -> bool:
        key = id(function)
        if key not in self.judged:
            try:
                graph = function.get_concrete_function(*args, **kwargs).graph
            except Exception:  # noqa: BLE001 - the call itself will raise it, as the script would see it
                return False
            self.judged[key] = trains(graph)
        return self.judged[key]


def function_name(function) -> str:
    """A tf.function's name, as `--at step:NAME` gives it."""
    return getattr(function, "__name__", "") or getattr(getattr(function, "_python_function", None), "__name__", "")


def trains(graph) -> bool:
    """Whether a function graph (or one it calls) computes gradients and writes variables."""
    graphs, grads, writes = [graph], False, False
    while graphs:
        g = graphs.pop()
        for op in g.get_operations():
            grads = grads or op.name.startswith(GRADIENT_MARKS) or "/gradient_tape/" in op.name
            writes = writes or op.type.startswith(WRITES)
        graphs += [f.graph for f in getattr(g, "_functions", {}).values() if getattr(f, "graph", None) is not None]
    return grads and writes


def _take(iterator, steps: int) -> list[tuple]:
    """The next `steps` batches of a Keras train function's iterator (or list of one batch), as argument tuples."""
    source = iter(iterator)
    batches = []
    for _ in range(steps):
        try:
            batch = next(source)
        except (StopIteration, Exception) as exc:  # noqa: BLE001 - tf.data ends with OutOfRangeError
            if batches and (isinstance(exc, StopIteration) or "OutOfRange" in type(exc).__name__):
                break
            raise
        batches.append(tuple(batch) if isinstance(batch, (tuple, list)) else (batch,))
    return batches


def _state_of(function, args, kwargs) -> list:
    """(variable, its value now) for every variable the step uses."""
    import tensorflow as tf

    graph = function.get_concrete_function(*args, **kwargs).graph
    return [(v, tf.identity(v.read_value())) for v in graph.variables]


def _put_back(saved: list) -> None:
    for v, value in saved:
        v.assign(value)


@contextlib.contextmanager
def hooked(hooks):
    """Within: every Keras model's make_train_function (of each Keras line the script imports) goes through
    `hooks.make_train_function(model, make, args, kwargs)`, and every tf.function call through
    `hooks.step_call(function, args, kwargs, call)`; both put back after, whatever happens. Nothing is imported
    here: each hook is attached when the script's own import of TensorFlow or of a Keras line has finished
    (targets/imports.py), so the script gets the Keras it chose."""
    from .imports import when_imported
    from .script import passing_through

    patched = []

    def patch(owner, name, make):
        original = getattr(owner, name)
        setattr(owner, name, make(original))
        patched.append((owner, name, original))

    def make_train_function(original):
        def hooked(self, *args, **kwargs):
            return passing_through(hooks.make_train_function)(self, original, args, kwargs)
        return hooked

    def function_call(original):
        def hooked(self, *args, **kwargs):
            return passing_through(hooks.step_call)(self, args, kwargs, lambda: original(self, *args, **kwargs))
        return hooked

    def on_keras(keras):
        patch(keras.Model, "make_train_function", make_train_function)

    def on_tensorflow(tf):
        patch(tfcompat.function_class(), "__call__", function_call)

    try:
        with when_imported({"tensorflow": passing_through(on_tensorflow), "keras": passing_through(on_keras),
                            "tf_keras": passing_through(on_keras)}):
            yield
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


class _Tee(io.TextIOBase):
    """The script's stdout, shown as it is written and kept."""

    def __init__(self, shown, kept: io.StringIO):
        self.shown, self.kept = shown, kept

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.shown.write(text)

    def flush(self) -> None:
        self.shown.flush()


def run_to_training(runner, at: Point, steps: int, *contexts) -> Caught:
    """Run the script (a targets.script.ScriptRunner) until its training call `at`, with `contexts` held (the
    TensorFlow setup); what it took there. A script that ends with no such call raises NoTrainingCall with what it
    defined (a target contract, maybe); one that exits before it cannot be tested."""
    from .script import ScriptExit

    output = io.StringIO()
    hooks = _Hooks(runner.path, at, steps, time.time(), output)
    saved_stdout = sys.stdout
    sys.stdout = _Tee(sys.stdout, output)  # the script's output is shown (on stderr's side of the report) and kept
    try:
        names = runner.run(*contexts, hooked(hooks), during="before its training call")
    except Intercepted as got:
        return got.caught
    except ScriptExit as exc:
        raise TargetError(f"{runner.path} exited (sys.exit({exc.value!r})) before any training call opbisect can "
                          f"take: Keras fit/train_on_batch, or a tf.function that computes gradients and writes "
                          f"variables") from None
    finally:
        sys.stdout = saved_stdout
    what = {"any": "training call", "fit": f"Keras training call number {at.index}",
            "call": f"training step call number {at.index}", "step": f"call of the tf.function {at.name!r}"}[at.kind]
    raise NoTrainingCall(f"run as it is, it ran to its end with no {what} opbisect can take (Keras "
                         f"fit/train_on_batch, or a tf.function that computes gradients and writes variables)", names)


class NoTrainingCall(TargetError):
    """A script run as it is ended without the training call asked for; `names`: what it defined."""

    def __init__(self, message: str, names: dict):
        super().__init__(message)
        self.names = names
