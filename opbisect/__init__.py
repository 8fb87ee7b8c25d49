"""opbisect: op-level nondeterminism bisection for TensorFlow."""

__version__ = "0.1.0"

from .deterministic import deterministic  # noqa: E402  (imports no TensorFlow until called)

__all__ = ["deterministic"]
