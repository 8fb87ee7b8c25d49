"""The patch library: deterministic replacements for the ops opbisect names as sources.

    registry.py     Patch, PATCHES (keyed by op type), family switches
    reductions.py   a deterministic segmented sum; segment sums, scatters with duplicate indices
    dense.py        BiasAddGrad, AddN, softmax cross-entropies, ResizeBilinearGrad
    selection.py    which ops to replace: a report's CSV, op types or op names
    rewrite.py      the step's GraphDef with exactly those nodes replaced (bodies of loops and branches too)

Importing this package imports no TensorFlow; the patches import it when they are traced.
"""

from . import dense, reductions  # noqa: F401  (they fill the registry)
from .registry import PATCHES, Patch, PatchContext

__all__ = ["PATCHES", "Patch", "PatchContext"]
