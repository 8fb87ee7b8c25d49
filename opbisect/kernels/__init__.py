"""opbisect's own TensorFlow ops, in one library built from source on first use, cached, loaded into TF:

- `OpbisectFingerprint` (capture): one op digests many tensors: on a GPU one CUDA launch per batch of up to 96
  tensors, reading each tensor once, instead of several TensorFlow kernels per tensor. Its CPU kernel computes the
  same function (and is what the tests check against the TensorFlow-ops definition in capture/fingerprint.py).
  With `side_stream`, the GPU kernel reads on a second stream beside the step's (side_stream.h), and
  `OpbisectAwaitDigests` is where the step's stream waits for those reads before anything uses the digests.
- `OpbisectScatterCombine` (patches): the rows of each repeated key summed in one fixed order (combine.h) and
  added into a variable's rows in place, one write per row: the scatter patches on a GPU.
- `OpbisectSegmentSum` (patches): the same sums written once each into a zeroed output: the segment-sum patches on
  a GPU.
- `OpbisectCombine`: the same sums as one padded row per distinct key. No patch uses it since the segment sum
  writes its output directly; benchmarks/check_combine.py times the segment sum against it (the former patch) until
  the H200 has ruled between the two.
- `OpbisectSoftmaxXent`, `OpbisectColumnSum`, `OpbisectChannelSum` (patches): the sparse softmax cross-entropy and
  its gradient, and a bias gradient's sums (channels last, channels first), each sum in one fixed order (dense.h),
  in one or two reads of the input.
- `OpbisectResizeBilinearGrad` (patches): the bilinear resize's gradient, each input element gathering its output
  pixels' terms in one fixed order (dense.h), where TensorFlow's GPU kernel scatters them with atomics.
The CPU kernels add in the GPU kernels' order, so the tests of the CPU forms check the function the GPU runs.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
OPS = ("fingerprint_op.cc", "combine_op.cc", "dense_op.cc")
CUDA_KERNELS = ("fingerprint_kernel.cu", "combine_kernel.cu", "dense_kernel.cu", "side_stream.cu")
SOURCES = ("fingerprint.h", "combine.h", "dense.h", "gpu_op.h", "side_stream.h", *OPS, *CUDA_KERNELS)


class BuildError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("OPBISECT_CACHE", Path.home() / ".cache" / "opbisect"))


def _key(cuda: bool) -> str:
    import tensorflow as tf

    digest = hashlib.sha256()
    for name in SOURCES + ("__init__.py",):  # the build recipe is part of the key too
        digest.update((HERE / name).read_bytes())
    digest.update(f"{tf.__version__} {tf.sysconfig.get_compile_flags()} cuda={cuda}".encode())
    return digest.hexdigest()[:16]


def _run(cmd: list[str]) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:  # no compiler on this machine
        raise BuildError(f"{cmd[0]} could not run ({exc.strerror})") from None
    if done.returncode:
        raise BuildError(f"{' '.join(cmd[:3])} ... failed:\n{done.stderr[-3000:]}")


def _run_all(cmds: list[list[str]]) -> None:
    """Run the commands side by side; raise BuildError for the first that failed."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(cmds)) as pool:
        for future in [pool.submit(_run, cmd) for cmd in cmds]:
            future.result()


def cuda_home() -> Path | None:
    nvcc = shutil.which("nvcc")
    for candidate in [os.environ.get("CUDA_HOME"), nvcc and str(Path(nvcc).resolve().parent.parent), "/usr/local/cuda"]:
        if candidate and (Path(candidate) / "include" / "cuda_runtime.h").exists():
            return Path(candidate)
    return None


def build(cuda: bool) -> Path:
    """Compile the op library (with its CUDA kernels when `cuda`) into the cache; return its path. A failed build
    is remembered in the cache too (delete build-failed.txt to try again)."""
    out = cache_dir() / _key(cuda)
    lib, failed = out / "opbisect_ops.so", out / "build-failed.txt"
    if lib.exists():
        return lib
    if failed.exists():  # this machine could not build it: do not pay the compiler again on every run
        raise BuildError(failed.read_text())
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _compile(out, lib, cuda)
    except BuildError as exc:
        failed.write_text(str(exc))
        raise


def _compile(out: Path, lib: Path, cuda: bool) -> Path:
    import tensorflow as tf

    cflags, lflags = tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()
    objects, defines, libs = [], [], []
    if cuda:
        home = cuda_home()
        if home is None:
            raise BuildError("no CUDA toolkit (nvcc and cuda_runtime.h) found: set CUDA_HOME")
        # The kernels compile side by side, each for its three targets in parallel (--threads 0): the first
        # build on a fresh GPU machine costs device time.
        compiles = []
        for kernel in CUDA_KERNELS:
            obj = out / kernel.replace(".cu", f"-{os.getpid()}.o")  # processes building at once (workers) apart
            compiles.append([str(home / "bin" / "nvcc"), "-O3", "-std=c++17", "--threads", "0", "-Xcompiler", "-fPIC",
                             "-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_80,code=sm_80",
                             "-gencode", "arch=compute_80,code=compute_80", "-c", str(HERE / kernel), "-o", str(obj)])
            objects.append(str(obj))
        _run_all(compiles)
        defines = ["-DOPBISECT_WITH_CUDA"]
        # Static cudart: TensorFlow loads its own (CUDA 12) runtime; this op must not need another .so.
        libs = [f"-L{home / 'lib64'}", f"-L{home / 'lib'}", "-lcudart_static", "-ldl", "-lrt", "-lpthread"]
    tmp = out / f"tmp-{os.getpid()}.so"
    _run(["g++", "-O2", "-shared", "-fPIC", *defines, *cflags, *[str(HERE / op) for op in OPS], *objects,
          "-o", str(tmp), *lflags, *libs])
    os.replace(tmp, lib)
    return lib


def load(cuda: bool):
    """The loaded op module (`opbisect_fingerprint`, `opbisect_combine`, `opbisect_scatter_combine`,
    `opbisect_segment_sum`, `opbisect_softmax_xent`, `opbisect_column_sum`); raises BuildError when it cannot be
    built. `cuda`: the GPU kernels are needed.
    Where TensorFlow sees a GPU the CUDA build (which has the CPU kernels too) is loaded whatever is asked:
    TensorFlow registers an op once per process, so a second library with the same ops would load as a module
    without them."""
    import tensorflow as tf

    if cuda or tf.config.list_physical_devices("GPU"):
        try:
            return _module(True)
        except BuildError:
            if cuda:
                raise
    return _module(False)


@functools.cache
def _module(cuda: bool):
    import tensorflow as tf

    return tf.load_op_library(str(build(cuda)))
