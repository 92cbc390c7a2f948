"""Every CUDA kernel compiles for cc 7.5, 8.0 and 9.0 with no register spills and <= 48 KiB shared memory.

Needs the ``ptx`` extra (numba-cuda[cu12]: NVVM and ptxas), no GPU. About a minute on two cores.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.ptx


def test_every_kernel_compiles_without_spills():
    ptx_check = pytest.importorskip("gpucal.kernels.ptx_check")
    try:
        ptx_check.find_ptxas()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    reports = ptx_check.check_all()
    kernels_seen = {r.kernel for r in reports}
    assert kernels_seen == {
        "group_sums[shared]",
        "group_sums[global]",
        "view_sums[shared]",
        "view_sums[global]",
        "view_bins",
        "code_range",
        "route_rows",
        "tree_leaves",
        "predict_trees",
        "chain_start",
        "mvce_split_sums",
        "chunk_blocks",
    }
    assert {r.cc for r in reports} == set(ptx_check.CCS)
    assert all(r.spill_bytes == 0 and r.shared_bytes <= 48 * 1024 for r in reports)
    assert max(r.shared_bytes for r in reports) == 48 * 1024  # the largest shared variant is checked
