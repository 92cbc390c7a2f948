"""Compile every CUDA kernel for real GPUs without one: ``numba.cuda.compile_ptx`` then ``ptxas -v``.

Run ``python -m gpucal.kernels.ptx_check`` (or the pytest marked ``ptx``). For each kernel variant, dtype
signature and compute capability in ``CCS`` it type-checks the kernel as the GPU compiler does, assembles
the PTX with ``ptxas -v`` and fails on register spills or on more than ``MAX_SHARED_BYTES`` of shared
memory. Needs the ``numba-cuda[cu12]`` wheels (NVVM and ptxas); no GPU and no driver.

numba-cuda asks the current device for its compute capability when a kernel calls a device function,
so ``fake_device`` stands in a device of the target capability while compiling (check-only code).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types as pytypes
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from numba import types

CCS = ((7, 5), (8, 0), (9, 0))
CODE_TYPES = (types.int8, types.int16, types.int32)
FLOAT_TYPES = (types.float32, types.float64)


@dataclass(frozen=True)
class PtxReport:
    """What ``ptxas -v`` reports for one kernel, signature and compute capability."""

    kernel: str
    dtypes: str
    cc: tuple[int, int]
    registers: int
    shared_bytes: int
    spill_bytes: int
    stack_bytes: int


def find_ptxas() -> str:
    """Return the path of ``ptxas``: the CUDA wheels' copy (via cuda-pathfinder) or the one on PATH."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        found = find_nvidia_binary_utility("ptxas")
    except ImportError:
        found = None
    found = found or shutil.which("ptxas")
    if not found:
        msg = "ptxas not found: install numba-cuda[cu12] (the nvidia-cuda-nvcc-cu12 wheel carries it)"
        raise RuntimeError(msg)
    return found


@contextlib.contextmanager
def fake_device(cc: tuple[int, int]) -> Iterator[None]:
    """Make numba-cuda's dispatcher see a device of capability ``cc`` (it has no GPU to ask)."""
    import numba.cuda.dispatcher as dispatcher

    real = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = real


def kernel_signatures() -> Iterator[tuple[str, str, Callable[..., Any], tuple[Any, ...]]]:
    """Yield ``(name, dtypes, python function, argument types)`` for every kernel variant and dtype."""
    from gpucal.kernels.group_sums_cuda import MAX_SHARED_SLOTS, make_group_sums_kernel
    from gpucal.kernels.views_cuda import make_view_sums_kernel, view_bins_kernel

    f64_1d, i64, u64 = types.float64[::1], types.int64, types.uint64
    for use_shared in (True, False):
        variant = "shared" if use_shared else "global"
        group_kernel = make_group_sums_kernel(use_shared, MAX_SHARED_SLOTS).py_func
        view_kernel = make_view_sums_kernel(use_shared, MAX_SHARED_SLOTS).py_func
        for ftype in FLOAT_TYPES:
            fa = ftype[::1]
            for ctype in CODE_TYPES:
                args = (ctype[:, ::1], fa, fa, fa, types.int32[::1], types.int64[::1], i64, f64_1d)
                yield f"group_sums[{variant}]", f"{ctype}, {ftype}", group_kernel, args
            view_args = (fa, fa, fa, i64, u64, u64, u64, u64, u64, u64, f64_1d)
            yield f"view_sums[{variant}]", str(ftype), view_kernel, view_args
    from gpucal.kernels.group_sums_cuda import code_range_kernel

    for ctype in CODE_TYPES:
        yield (
            "code_range",
            str(ctype),
            code_range_kernel.py_func,
            (ctype[:, ::1], types.int64[::1], types.int64[::1]),
        )
    yield (
        "view_bins",
        "uint64",
        view_bins_kernel.py_func,
        (u64[::1], u64, u64, u64, u64, u64, types.int32[:, ::1]),
    )
    from gpucal.kernels.split_mvce_cuda import mvce_split_sums_kernel

    i64_1d, u64_1d = types.int64[::1], types.uint64[::1]
    for ftype in FLOAT_TYPES:
        fa = ftype[::1]
        for ctype in CODE_TYPES:
            split_args = (
                *(ctype[:, ::1], fa, fa, fa, types.int32[::1], i64_1d),
                *(u64_1d, u64_1d, i64_1d, u64_1d, u64_1d),
                *(types.float64[:, :, ::1], types.float64[:, ::1], i64_1d),
                *(i64, i64, u64, u64, i64, f64_1d),
            )
            yield "mvce_split_sums", f"{ctype}, {ftype}", mvce_split_sums_kernel.py_func, split_args
    from gpucal.kernels.trees_cuda import (
        chain_start_kernel,
        predict_trees_kernel,
        route_rows_kernel,
        tree_leaves_kernel,
    )

    i32_1d = types.int32[::1]
    tree_nodes = (i32_1d, types.int64[::1], i32_1d)  # node_feature, node_child_base, child_table
    for ctype in CODE_TYPES:
        codes_type = ctype[:, ::1]
        route_args = (codes_type, i32_1d, *tree_nodes, i32_1d)
        yield "route_rows", str(ctype), route_rows_kernel.py_func, route_args
        leaves_args = (codes_type, *tree_nodes, types.int64[::1], types.int32[:, ::1])
        yield "tree_leaves", str(ctype), tree_leaves_kernel.py_func, leaves_args
        for ftype in FLOAT_TYPES:
            predict_args = (
                *(codes_type, ftype[::1], *tree_nodes),
                *(types.float64[:, ::1], types.int64[::1], i64),
                *(types.float64, types.float64, types.boolean, types.boolean, f64_1d),
            )
            yield "predict_trees", f"{ctype}, {ftype}", predict_trees_kernel.py_func, predict_args
    start_args = (f64_1d, types.float64, types.float64, i64, f64_1d)
    yield "chain_start", "float64", chain_start_kernel.py_func, start_args
    from gpucal.kernels.pav_chunks_cuda import chunk_blocks_kernel

    chunk_args = (
        f64_1d,
        f64_1d,
        f64_1d,
        types.int64[::1],
        types.float64,
        types.float64[:, ::1],
        types.int64[::1],
    )
    yield "chunk_blocks", "float64", chunk_blocks_kernel.py_func, chunk_args


def _parse(kernel: str, dtypes: str, cc: tuple[int, int], log: str) -> PtxReport:
    def number(pattern: str) -> int:
        return sum(int(m) for m in re.findall(pattern, log))

    return PtxReport(
        kernel=kernel,
        dtypes=dtypes,
        cc=cc,
        registers=number(r"Used (\d+) registers"),
        shared_bytes=number(r"(\d+) bytes smem"),
        spill_bytes=number(r"(\d+) bytes spill stores") + number(r"(\d+) bytes spill loads"),
        stack_bytes=number(r"(\d+) bytes stack frame"),
    )


def check_all(ccs: tuple[tuple[int, int], ...] = CCS) -> list[PtxReport]:
    """Compile and assemble every kernel signature for every capability in ``ccs``; return the reports."""
    from numba import cuda

    from gpucal.kernels.group_sums_cuda import MAX_SHARED_BYTES

    ptxas = find_ptxas()
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        for cc in ccs:
            with fake_device(cc):
                for name, dtypes, func, args in kernel_signatures():
                    ptx, _ = cuda.compile_ptx(func, args, cc=cc)
                    path = os.path.join(tmp, "kernel.ptx")
                    with open(path, "w") as fh:
                        fh.write(ptx)
                    arch = f"-arch=sm_{cc[0]}{cc[1]}"
                    run = subprocess.run(
                        [ptxas, "-v", arch, path, "-o", os.devnull],
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    if run.returncode != 0:
                        msg = f"ptxas failed for {name}({dtypes}) on sm_{cc[0]}{cc[1]}:\n{run.stderr}"
                        raise RuntimeError(msg)
                    report = _parse(name, dtypes, cc, run.stderr)
                    if report.spill_bytes or report.shared_bytes > MAX_SHARED_BYTES:
                        msg = f"{report}: register spills or shared memory above {MAX_SHARED_BYTES} bytes"
                        raise RuntimeError(msg)
                    reports.append(report)
    return reports


def format_table(reports: list[PtxReport]) -> str:
    """Return a markdown table of registers, shared memory, spills and stack per kernel and capability."""
    rows = [
        "| kernel | dtypes | cc | registers | shared bytes | spill bytes | stack bytes |",
        "|---" * 7 + "|",
    ]
    for r in reports:
        rows.append(
            f"| {r.kernel} | {r.dtypes} | {r.cc[0]}.{r.cc[1]} | {r.registers} | {r.shared_bytes} "
            f"| {r.spill_bytes} | {r.stack_bytes} |"
        )
    return "\n".join(rows)


def main() -> int:
    """Check every kernel, print the table and the time taken; exit status 0 when all pass."""
    start = time.perf_counter()
    reports = check_all()
    print(format_table(reports))
    print(f"\n{len(reports)} kernel signatures compiled and assembled in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
