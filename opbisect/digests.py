"""The bytes a value is compared by, the same in every process: an array's dtype, shape and contents. A string
tensor comes to NumPy as an array of bytes objects, whose buffer holds this process's pointers, so its contents
are its items, each with its length."""

from __future__ import annotations


def value_bytes(value) -> bytes:
    import numpy as np

    array = np.ascontiguousarray(np.asarray(value))
    head = f"{array.dtype.str}{array.shape}".encode()
    if array.dtype != object:
        return head + array.tobytes()
    items = (item if isinstance(item, bytes) else str(item).encode() for item in array.reshape(-1))
    return head + b"".join(len(item).to_bytes(8, "little") + item for item in items)
