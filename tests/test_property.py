"""Property: in a generated graph with a fault injected at a random op, that op and nothing else is the source."""

from __future__ import annotations

import textwrap

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import trace

UNARY = ["tf.tanh({a})", "tf.nn.relu({a})", "({a} * 1.5)", "tf.reduce_sum({a}, keepdims=True) + {a}",
         "tf.matmul({a}, m)", "tf.cumsum({a}, axis=1)"]
BINARY = ["({a} + {b})", "({a} * {b})", "tf.maximum({a}, {b})", "({a} - 0.5 * {b})"]


@st.composite
def step_graphs(draw):
    """(script body, name of the faulty op): a chain of 3-10 ops on [4, 4] tensors, a variable update, and
    one op replaced by a numpy_function that adds a per-call counter (different in every run)."""
    n = draw(st.integers(3, 10))
    fault = draw(st.integers(0, n - 1))
    lines = []
    for i in range(n):
        if i >= 1 and draw(st.booleans()):
            expr = draw(st.sampled_from(BINARY)).format(a=f"t{draw(st.integers(0, i - 1))}",
                                                        b=f"t{draw(st.integers(0, i - 1))}")
        else:
            expr = draw(st.sampled_from(UNARY)).format(a=f"t{i - 1}" if i else "x")
        if i == fault:
            expr = f"tf.numpy_function(bump, [{expr}], tf.float32, name='fault')"
        lines.append(f"t{i} = tf.ensure_shape({expr}, [4, 4])")
    update = f"w.assign_add(0.01 * t{draw(st.integers(0, n - 1))})"
    body = textwrap.indent("\n".join(lines + [update, f"return tf.reduce_mean(t{n - 1})"]), " " * 4)
    script = (
        "calls = [0]\n\n\n"
        "def bump(x):\n    calls[0] += 1\n    return (x + np.float32(calls[0])).astype(np.float32)\n\n\n"
        "m = tf.constant(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4))\n"
        "w = tf.Variable(tf.zeros([4, 4]), name='w')\n\n\n"
        "@tf.function\ndef step(x):\n" + body + "\n\n\n"
        "inputs = (tf.constant(np.arange(16, dtype=np.float32).reshape(4, 4) / 16),)\n"
    )
    return script


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(step_graphs())
def test_an_injected_fault_is_found_exactly(tmp_path_factory, script):
    folder = tmp_path_factory.mktemp("generated")
    path = folder / "generated_step.py"
    path.write_text("import numpy as np\nimport tensorflow as tf\n\n" + script)
    t = trace(path, folder / "reports", runs=2, magnitude_runs=2)
    assert t.sources == ["fault"], t.lines
    row = t.row("fault")
    assert row["kind"] == "op" and row["op_type"] == "PyFunc"
    # The exit code is the verdict on the uninstrumented step (whose own runs may saturate the fault away: tanh of
    # a large bump is 1.0, or a maximum with a larger tensor while the bump is small, in the plain runs that come
    # first), never a consequence of the instrumented runs alone; the fault is called an observer effect only then.
    assert t.code == t.record.facts.verdict.exit_code == int(t.record.default.first_differing_step() is not None)
    assert row["observer_effect"] == (t.code == 0 and bool(row["affects_result"]))
