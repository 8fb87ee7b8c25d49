"""opbisect: op-level nondeterminism bisection for TensorFlow."""

__version__ = "0.1.0"
