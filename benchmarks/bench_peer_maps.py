"""Speed of the peer maps and classical tests against their references, side by side in one run.

Calibrators (fit on ``n`` rows, then predict those ``n`` rows): Venn-Abers (inductive) against probcal
0.4 and the ``venn-abers`` package, cross Venn-Abers (5 folds) against probcal, centred isotonic
regression against probcal. Tests on ``n`` rows: Hosmer-Lemeshow, Spiegelhalter's z, the Murphy
decomposition, the per-grade binomial and Jeffreys tests against probcal; Cox's calibration slope (with
its SEs and joint test) against statsmodels' GLM and probcal's ``calibration_slope`` (slope only), and
the calibration intercept (the offset model, with its SE) against statsmodels' GLM with the logit as
offset and probcal's ``calibration_intercept`` (intercept only).
Spline calibration against ml-insights' ``SplineCalib``, BBQ and ENIR against netcal's ``BBQ`` and
``ENIR``; the SKCE (unbiased quadratic, Laplace kernel) and its asymptotic test against probcal; the
calibration belt (80% and 95% bands on calibration-belt's 50-point grid) against ``calibration-belt``.

Each pair's outputs must agree (the largest difference is reported). A reference that would not finish
in a few minutes on this machine at ``n`` rows (``REFERENCE_ROWS``) runs once on fewer rows, with gpucal
timed on those rows too. gpucal is
warmed up on small data first (numba's cache load); each timing is one call (the machine is shared).
Writes ``benchmarks/results/peer_maps.md``.

Usage: ``python benchmarks/bench_peer_maps.py [--sizes 1000000 10000000] [--cases NAME ...] [--report PATH]``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import io
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "peer_maps.md"
# Largest row counts each reference gets here (2 shared cores): probcal's Venn-Abers sweeps Python
# lists (104 s at 1e6 in this run's first try), venn-abers recomputes slopes over the suffix (4.6 s at
# 1e5, more than 8 minutes at 1e6); the cross predictor is five probcal fits (4.4 CPU seconds at 1e5,
# linear in rows: about 45 at 1e6, 450 at 1e7). Above its cap a reference runs once on the first ``cap``
# rows, and gpucal is timed on those rows too for the ratio.
REFERENCE_ROWS = {
    "venn_abers/venn-abers": 100_000,
    "venn_abers/probcal": 1_000_000,
    "cross_venn_abers/probcal": 1_000_000,
    # ml-insights' SplineCalib: 35 s on 2e4 rows here (an L-BFGS fit of a dense n x 39 basis per
    # penalty), about half an hour at 1e6. probcal's quadratic SKCE holds n x n matrices (3 GB at 1e4).
    "spline/ml-insights": 100_000,
    "skce/probcal": 10_000,
    # netcal's BBQ fits one histogram per bin count (462 at 1e5, 991 at 1e6) and scores each in torch.
    "bbq/netcal": 100_000,
    # netcal's ENIR steps its near-isotonic path with Python loops over the blocks: 17 s at 1e4,
    # more than 15 minutes at 1e5.
    "enir/netcal": 10_000,
    # calibration-belt solves two trust-constr problems over every row per grid point and level: 60 s
    # of CPU at 3e3 rows.
    "calibration_belt/calibration-belt": 3_000,
}


def timed(call: Callable[[], Any]) -> tuple[float, float, Any]:
    """``(wall seconds, CPU seconds of this process, every thread, output)`` of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    out = call()
    return time.perf_counter() - start, time.process_time() - cpu, out


def load() -> str:
    """The 1-minute load average (the machine is shared: wall times stretch with it)."""
    return f"{os.getloadavg()[0]:.1f}"


def belt_grid(p: np.ndarray) -> np.ndarray:
    """calibration-belt's grid: 25 probabilities evenly spaced on the logit, 25 on the probability."""
    z = np.log(p) - np.log1p(-p)
    on_logit = 1.0 / (1.0 + np.exp(-np.linspace(z.min(), z.max(), 25)))
    return np.sort(np.concatenate([on_logit, np.linspace(p.min(), p.max(), 25)]))


def make_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.beta(0.8, 1.5, n)
    y = (rng.random(n) < np.clip(1.2 * p, 0, 1)).astype(np.float64)
    grades = np.array(list("ABCDEFG"))[np.minimum((p * 7).astype(int), 6)]
    return y, p, grades


def gpucal_cases() -> dict[str, Callable[..., Any]]:
    import gpucal
    from gpucal import metrics

    def ivap(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        cal = gpucal.VennAbersCalibrator().fit(p, y)
        return np.column_stack([cal.predict(p), cal.predict_interval(p)])

    def cvap(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        return gpucal.VennAbersCalibrator(n_folds=5).fit(p, y).predict(p)

    def belt(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        r = metrics.calibration_belt(y, p, grid=belt_grid(p))
        return np.column_stack([r.lower[0], r.upper[0], r.lower[1], r.upper[1]])

    def slope(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        r = metrics.calibration_slope(y, p)
        return np.array([r.intercept, r.slope, r.intercept_se, r.slope_se])

    return {
        "venn_abers": ivap,
        "cross_venn_abers": cvap,
        "centered_isotonic": lambda y, p, g: (
            gpucal.CenteredIsotonicCalibrator(interior_strict=False).fit(p, y).predict(p)
        ),
        "hosmer_lemeshow": lambda y, p, g: metrics.hosmer_lemeshow(y, p).statistic,
        "spiegelhalter_z": lambda y, p, g: metrics.spiegelhalter_z(y, p).z,
        "murphy_decomposition": lambda y, p, g: metrics.murphy_decomposition(y, p).reliability,
        "calibration_slope": slope,
        "calibration_intercept": lambda y, p, g: np.array(
            [(r := metrics.calibration_intercept(y, p)).intercept, r.se]
        ),
        "binomial_grade_test": lambda y, p, g: metrics.binomial_grade_test(y, p, g).p_value,
        "jeffreys_grade_test": lambda y, p, g: metrics.jeffreys_grade_test(y, p, g).p_value,
        "spline": lambda y, p, g: gpucal.SplineCalibrator().fit(p, y).predict(p),
        "bbq": lambda y, p, g: gpucal.BBQCalibrator().fit(p, y).predict(p),
        "enir": lambda y, p, g: gpucal.ENIRCalibrator().fit(p, y).predict(p),
        "skce": lambda y, p, g: metrics.skce(y, p).statistic,
        "skce_test": lambda y, p, g: metrics.skce_test(y, p).statistic,
        "calibration_belt": belt,
    }


def reference_cases() -> dict[str, list[tuple[str, Callable[..., Any], Callable[[Any], Any]]]]:
    """Per case: (reference name, call, how to read the gpucal output it is compared with)."""
    import probcal.metrics as pm
    from probcal.isotonic import CenteredIsotonicCalibrator
    from probcal.metrics.kernel import skce, skce_test
    from probcal.vennabers import CrossVennAbersCalibrator, VennAbersCalibrator

    def probcal_ivap(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        cal = VennAbersCalibrator().fit(p, y)
        return np.column_stack([cal.predict_proba(p), cal.predict_interval(p)])

    def package_ivap(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        from venn_abers import VennAbers

        two = np.column_stack([1 - p, p])
        merged, pairs = VennAbers().fit(p_cal=two, y_cal=y).predict_proba(p_test=two)
        return np.column_stack([merged[:, 1], pairs])

    def statsmodels_slope(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        import statsmodels.api as sm

        q = np.clip(p, 1e-12, 1 - 1e-12)
        z = np.log(q) - np.log1p(-q)
        fit = sm.GLM(y, np.column_stack([np.ones_like(z), z]), family=sm.families.Binomial()).fit()
        return np.concatenate([fit.params, fit.bse])

    def statsmodels_intercept(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        import statsmodels.api as sm

        q = np.clip(p, 1e-12, 1 - 1e-12)
        z = np.log(q) - np.log1p(-q)
        fit = sm.GLM(y, np.ones((y.shape[0], 1)), offset=z, family=sm.families.Binomial()).fit()
        return np.concatenate([fit.params, fit.bse])

    def spline_calib(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        import warnings

        from ml_insights import SplineCalib

        cal = SplineCalib()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # its exp overflows
            cal.fit(p, y)
        return cal.calibrate(p)

    def package_belt(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        import importlib.metadata
        import importlib.util
        import warnings

        # its top-level calibration.py is shadowed by uncertainty-calibration's calibration package
        path = importlib.metadata.distribution("calibration-belt").locate_file("calibration.py")
        spec = importlib.util.spec_from_file_location("calibration_belt_reference", str(path))
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        belt = module.CalibrationBelt(y, p)
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):  # tqdm bars
            warnings.simplefilter("ignore")
            low, high = (belt.calculate_boundaries(level, size=50) for level in (0.8, 0.95))
        return np.column_stack([low[:, 1], low[:, 2], high[:, 1], high[:, 2]])

    def netcal_bbq(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        from netcal.binning import BBQ

        return BBQ().fit(p, y).transform(p)

    def netcal_enir(y: np.ndarray, p: np.ndarray, g: np.ndarray) -> Any:
        from netcal.binning import ENIR

        with contextlib.redirect_stdout(io.StringIO()):  # it prints its progress
            return ENIR().fit(p, y.astype(np.int64)).transform(p)

    same = lambda out: out  # noqa: E731
    return {
        "venn_abers": [("probcal", probcal_ivap, same), ("venn-abers", package_ivap, same)],
        # probcal deals its own stratified folds: the merged outputs differ by the folds' noise.
        "cross_venn_abers": [
            ("probcal", lambda y, p, g: CrossVennAbersCalibrator(cv=5).fit(p, y).predict_proba(p), same)
        ],
        "centered_isotonic": [
            ("probcal", lambda y, p, g: CenteredIsotonicCalibrator().fit(p, y).predict_proba(p), same)
        ],
        "hosmer_lemeshow": [("probcal", lambda y, p, g: pm.hosmer_lemeshow(y, p).statistic, same)],
        "spiegelhalter_z": [("probcal", lambda y, p, g: pm.spiegelhalter_z(y, p).z, same)],
        "murphy_decomposition": [
            ("probcal", lambda y, p, g: pm.murphy_decomposition(y, p).reliability, same)
        ],
        "calibration_slope": [
            ("statsmodels", statsmodels_slope, same),
            ("probcal", lambda y, p, g: pm.calibration_slope(y, p), lambda out: out[1]),
        ],
        "calibration_intercept": [
            ("statsmodels", statsmodels_intercept, same),
            ("probcal", lambda y, p, g: pm.calibration_intercept(y, p), lambda out: out[0]),
        ],
        "binomial_grade_test": [("probcal", lambda y, p, g: pm.binomial_grade_test(y, p, g).p_value, same)],
        "jeffreys_grade_test": [("probcal", lambda y, p, g: pm.jeffreys_grade_test(y, p, g).p_value, same)],
        "spline": [("ml-insights", spline_calib, same)],
        "bbq": [("netcal", netcal_bbq, same)],
        "enir": [("netcal", netcal_enir, same)],
        "skce": [("probcal", lambda y, p, g: skce(y, p), same)],
        "calibration_belt": [("calibration-belt", package_belt, same)],
        # probcal pairs the rows after a seeded permutation, gpucal in row order: different pairs.
        "skce_test": [("probcal", lambda y, p, g: skce_test(y, p, method="asymptotic").statistic, same)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--cases", nargs="+", default=None, help="run only these cases")
    parser.add_argument("--report", type=Path, default=RESULTS, help="where the report goes")
    args = parser.parse_args()
    ours, refs = gpucal_cases(), reference_cases()
    if args.cases is not None:
        ours = {case: call for case, call in ours.items() if case in args.cases}
    small = make_data(10_000, 1)
    for call in ours.values():  # numba's cache load, scipy's imports
        call(*small)
    lines = [
        "# Peer maps and classical tests against their references",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{os.cpu_count()} cores, shared with other jobs (one call each; wall and CPU seconds, the CPU "
        "time of every thread of the process; `load`: the 1-minute load average after the call).",
        "Produced by `python benchmarks/bench_peer_maps.py`. Calibrators: fit on n rows, predict those n "
        "rows. `max |diff|`: the largest difference between gpucal's output and the reference's. A "
        "reference capped below n (`REFERENCE_ROWS`) runs on the first rows, gpucal timed there too.",
        "",
        "| case | rows | gpucal s | gpucal CPU s | reference | reference s | reference CPU s "
        "| ratio wall | ratio CPU | max abs diff | load |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    capped_done: set[str] = set()
    for n in args.sizes:
        full = make_data(n)
        for case, call in ours.items():
            seconds, cpu, out = timed(functools.partial(call, *full))
            print(f"{case} n={n}: gpucal {seconds:.2f} s ({cpu:.2f} s CPU, load {load()})", flush=True)
            for ref_name, ref_call, read in refs[case]:
                key = f"{case}/{ref_name}"
                cap = REFERENCE_ROWS.get(key)
                rows, data, ours_seconds, ours_cpu, ours_out = n, full, seconds, cpu, out
                if cap is not None and n > cap:
                    lines.append(
                        f"| {case} | {n:.0e} | {seconds:.2f} | {cpu:.2f} | {ref_name} | capped at "
                        f"{cap:.0e} | | | | | {load()} |"
                    )
                    if key in capped_done:
                        continue
                    capped_done.add(key)
                    rows, data = cap, tuple(a[:cap] for a in full)
                    ours_seconds, ours_cpu, ours_out = timed(functools.partial(call, *data))
                y, p, g = data
                ref_seconds, ref_cpu, ref_out = timed(functools.partial(ref_call, y, p, g))
                diff = float(np.max(np.abs(np.asarray(read(ours_out)) - np.asarray(ref_out))))
                print(
                    f"  {ref_name} {ref_seconds:.2f} s ({ref_cpu:.2f} s CPU) on {rows} rows, diff {diff:.1e}",
                    flush=True,
                )
                lines.append(
                    f"| {case} | {rows:.0e} | {ours_seconds:.2f} | {ours_cpu:.2f} | {ref_name} | "
                    f"{ref_seconds:.2f} | {ref_cpu:.2f} | {ref_seconds / ours_seconds:.1f}x | "
                    f"{ref_cpu / ours_cpu:.1f}x | {diff:.1e} | {load()} |"
                )
    lines += [
        "",
        "Notes: `cross_venn_abers` differs from probcal by its folds (per-row counter-based draws here, "
        "probcal's stratified shuffle): the difference column is the folds' noise, not an error; with "
        "probcal's folds the outputs are equal (tests/test_calibrators_peer_maps.py). `centered_isotonic` "
        "runs with `interior_strict=False`, probcal's pooling rule. The grade tests' inputs are seven "
        "string grades. `spline` differs from ml-insights by its knots (quantiles here, random draws "
        "there), held-out rows and final training rows: the difference is the fit's noise. `skce_test` "
        "pairs rows in their order, probcal after a seeded permutation: different pairs, so the "
        "statistics differ by their noise (equal on probcal's pairing, "
        "tests/test_metrics_kernel_calibration.py). `bbq` follows the paper (BDeu evidence, equal-mass "
        "bins), netcal scores by BIC with equal-width bins: the difference is one of definition. "
        "`calibration_belt` differs from calibration-belt by its optimiser: trust-constr stopped at "
        "tol 1e-5 with probabilities clipped at 1e-5 there, Newton on the region's optimality "
        "conditions here (equal to a brute-force search, tests/test_metrics_belt.py).",
    ]
    args.report.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.report}")


if __name__ == "__main__":
    main()
