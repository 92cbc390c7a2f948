r"""Field-aware neural calibration (NeuCalib): a monotone map of the logit plus a learnt field bias.

.. math::

    q(l, x) = \sigma\big(\eta(l) + g(x)\big), \qquad
    g(x) = w_2^\top \mathrm{ReLU}\big(W_1 [e_1(x_1); \dots; e_F(x_F)] + c_1\big) + c_2,

with :math:`\eta` the piecewise-linear logit map of :mod:`gpucal.neural.piecewise` and :math:`e_j` an
embedding table per field (the field-aware calibration notes, section "解决方案", the solution). The
training code is in ``_train``; this module holds the estimator, the field vocabulary (which values get
an embedding of their own) and the forward pass used at prediction, in plain numpy / cupy.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sklearn.utils.validation import check_is_fitted

from gpucal._backend import array_namespace, is_cupy_array, to_numpy
from gpucal._frames import InputInfo, parse_input
from gpucal._validation import check_consistent_length, check_labels, check_sample_weight
from gpucal.calibrators.base import (
    OUTPUT_TYPE_OPTIONS,
    SCORE_KIND_OPTIONS,
    Constraint,
    Interval,
    Options,
)
from gpucal.calibrators.feature_platt import EncodedFeatureCalibrator, encoder_params, score_feature
from gpucal.calibrators.logistic import class_weights_present, sigmoid
from gpucal.encoding import FeatureEncoder, resolve_feature_cols
from gpucal.encoding.encoder import MAX_CROSS_LEVELS, MIN_CROSS_COUNT
from gpucal.kernels import value_offsets
from gpucal.neural._torch import (
    MAX_TORCH_SEED,
    MAX_TORCH_THREADS,
    as_tensor,
    load_training,
    require_torch,
    torch_device,
    training_torch,
)
from gpucal.neural.piecewise import MAX_KNOTS, check_knots, eta_logit, finish_eta, fit_eta, knot_coordinates
from gpucal.persistence import MAX_TERM, plain_numbers
from gpucal.registry import calibration_method
from gpucal.rows import as_rows, reject_dask

# Rows per chunk of the prediction's forward pass: bounds the (rows, fields x dim) temporaries.
PREDICT_CHUNK_ROWS = 1 << 16
# The start of the joint training: eta alone, solved by L-BFGS (PiecewiseLogitCalibrator's defaults).
START_MAX_ITER = 200
START_TOL = 1e-7
# ... on at most this many of the training rows (seeded): eta has n_knots + 1 values, and the joint
# training moves them again; on 36,000 rows the start took a third of the fit.
START_ROWS = 1 << 14


def validation_mask(
    n_rows: int, fraction: float, seed: int, weights: Any = None, labels: Any = None
) -> np.ndarray | None:
    """Rows held out for early stopping (a seeded random ``fraction``), or None when ``fraction`` is 0.

    Also None when, under ``weights``, the held-out rows or the training rows weigh nothing (weights
    zero on all but a few rows): a weightless validation loss is 0/0 and could stop nothing, and a
    weightless training set has nothing to fit, so every row trains for ``max_epochs`` epochs instead.
    Likewise when the training rows would hold one class of ``labels`` only (every positive of a rare
    class drawn into the held-out rows): there would be nothing to calibrate.
    """
    n_held = round(fraction * n_rows)
    if fraction == 0.0 or n_held == 0:
        return None
    if n_held >= n_rows:
        msg = f"validation_fraction={fraction} leaves no training row out of {n_rows}"
        raise ValueError(msg)
    mask = np.zeros(n_rows, dtype=bool)
    mask[np.random.default_rng(seed).permutation(n_rows)[:n_held]] = True
    w = None if weights is None else to_numpy(weights)
    if w is not None and (not (w[mask] > 0).any() or not (w[~mask] > 0).any()):
        return None
    if labels is not None and not _two_classes(to_numpy(labels), w, np.flatnonzero(~mask)):
        return None
    return mask


def start_rows(
    n_rows: int, held_out: np.ndarray | None, seed: int, labels: Any = None, weights: Any = None
) -> np.ndarray:
    """The training rows the start of eta is fitted on: all, or a seeded :data:`START_ROWS` of them;
    all when that draw misses a class of ``labels`` the training rows hold (ten positives in 100,000
    rows miss a 16,384-row draw about one time in seven)."""
    rows = np.arange(n_rows) if held_out is None else np.flatnonzero(~held_out)
    if rows.shape[0] <= START_ROWS:
        return rows
    drawn = np.sort(np.random.default_rng(seed).choice(rows, START_ROWS, replace=False))
    if labels is None:
        return drawn
    y, w = to_numpy(labels), None if weights is None else to_numpy(weights)
    return drawn if _two_classes(y, w, drawn) else rows


def _two_classes(y: np.ndarray, w: np.ndarray | None, rows: np.ndarray) -> bool:
    """Whether both classes carry weight on ``rows`` (the rule of the fits' ``check_two_classes``)."""
    weight = np.ones(rows.shape[0]) if w is None else w[rows]
    return all(class_weights_present(y[rows], weight))


@dataclass(frozen=True)
class FieldNetSpec:
    """Shape of the field network ``g``: ``n_rows`` embedding rows in all, ``n_fields`` read per row."""

    n_rows: int
    n_fields: int
    dim: int
    hidden_units: int


def field_vocabulary(
    codes: Any, n_values: np.ndarray, min_value_rows: int, weights: Any
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Map every code of every field to a row of the stacked embedding table.

    A code held by at least ``min_value_rows`` fit rows of positive weight gets a row of its own; every
    other code (rare values, values of rows that weigh nothing, the unseen code, a missing code no row
    has) shares its field's *unknown* row, the last of the field's block. The unknown embedding is thus
    learnt from the rare values, the nearest thing in the data to a value never seen. (A value of rows
    of weight 0 had a row of its own that nothing trained: it kept its random start.)

    Returns
    -------
    code_rows : numpy.ndarray of int64, shape (sum(n_values),)
        Table row of each code, fields in order (``value_offsets(n_values)``).
    counts : list of numpy.ndarray
        Fit rows of positive weight per code, one array per field.
    """
    xp = array_namespace(codes)
    weighed = codes[xp.asarray(weights) > 0]
    code_rows, counts = [], []
    first_row = 0
    for j, n in enumerate(n_values):
        count = to_numpy(xp.bincount(weighed[:, j].astype(xp.int64), minlength=int(n)))
        own = count >= min_value_rows
        n_own = int(own.sum())
        code_rows.append(np.where(own, np.cumsum(own) - 1, n_own) + first_row)
        counts.append(count)
        first_row += n_own + 1
    return np.concatenate(code_rows).astype(np.int64), counts


def embedding_rows(codes: Any, code_rows: np.ndarray, n_values: np.ndarray) -> Any:
    """Return the ``(n, n_fields)`` int64 table rows of the codes (on the codes' device)."""
    xp = array_namespace(codes)
    lookup = xp.asarray(code_rows)
    offsets = xp.asarray(value_offsets(np.asarray(n_values, dtype=np.int64)))
    return lookup[codes.astype(xp.int64) + offsets[None, :]]


def field_term(rows: Any, embedding: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> Any:
    r"""Return :math:`g(x)` per row from the table rows: embeddings, concatenated, through the MLP.

    numpy or cupy, float64, in chunks of :data:`PREDICT_CHUNK_ROWS` rows; the same arithmetic as the
    torch module (ReLU between layers, none after the last).
    """
    xp = array_namespace(rows)
    table = xp.asarray(embedding, dtype=xp.float64)
    weights = [(xp.asarray(weight), xp.asarray(bias)) for weight, bias in layers]
    out = xp.empty(rows.shape[0], dtype=xp.float64)
    for start in range(0, rows.shape[0], PREDICT_CHUNK_ROWS):
        part = rows[start : start + PREDICT_CHUNK_ROWS]
        h = table[part].reshape(part.shape[0], -1)
        for i, (weight, bias) in enumerate(weights):
            h = h @ weight.T + bias
            if i < len(weights) - 1:
                h = xp.maximum(h, 0.0)
        out[start : start + part.shape[0]] = h[:, 0]
    return out


def _on_device_of(reference: Any, a: np.ndarray) -> Any:
    """Return host array ``a`` on the device of ``reference`` (cupy when it is a cupy array)."""
    if is_cupy_array(reference):
        import cupy

        return cupy.asarray(a)
    return a


def trained_counts(
    codes: Any, n_values: np.ndarray, held_out: np.ndarray | None, weights: Any
) -> list[np.ndarray]:
    """Per field, the rows of each code that train the network: not held out, of positive weight."""
    trains = to_numpy(weights) > 0.0
    if held_out is not None:
        trains &= ~held_out
    host = to_numpy(codes)[trains]
    return [np.bincount(host[:, j].astype(np.int64), minlength=int(n)) for j, n in enumerate(n_values)]


def untrained_to_unknown(
    code_rows: np.ndarray, n_values: np.ndarray, trained: list[np.ndarray]
) -> np.ndarray:
    """``code_rows`` with every code that has a row of its own but no training row (``trained``:
    :func:`trained_counts`; its rows were all held out) sent to its field's unknown row: its own row
    kept its random start."""
    code_rows = code_rows.copy()
    offsets = value_offsets(np.asarray(n_values, dtype=np.int64))
    for j, n in enumerate(n_values):
        rows = code_rows[offsets[j] : offsets[j] + int(n)]  # a view: written in place
        unknown = int(rows.max())
        rows[(rows != unknown) & (trained[j] == 0)] = unknown
    return code_rows


def fill_unknown_rows(
    embedding: np.ndarray,
    code_rows: np.ndarray,
    n_values: np.ndarray,
    counts: list[np.ndarray],
    trained: list[np.ndarray],
) -> np.ndarray:
    """Give each field whose unknown row no training row reached (``trained``: :func:`trained_counts`)
    the row-weighted mean (``counts``: :func:`field_vocabulary`'s) of its own rows.

    Without rare values nothing trains the unknown row; an unseen value then gets the average value's
    embedding rather than its random initialisation. Nor does a rare value whose rows were all held out
    or weigh nothing.
    """
    embedding = embedding.copy()
    offsets = value_offsets(np.asarray(n_values, dtype=np.int64))
    for j, n in enumerate(n_values):
        rows = code_rows[offsets[j] : offsets[j] + int(n)]
        unknown = int(rows.max())
        own = rows != unknown
        if trained[j][~own].sum() > 0 or not own.any():
            continue
        w = counts[j][own].astype(np.float64)
        embedding[unknown] = (w[:, None] * embedding[rows[own]]).sum(axis=0) / w.sum()
    return embedding


@calibration_method("neucalib", aliases=("field_aware",))
class FieldAwareCalibrator(EncodedFeatureCalibrator):
    r"""NeuCalib: a monotone piecewise-linear map of the logit plus a field network, trained with PyTorch.

    .. math::

        \hat p = \sigma\big(\eta(l) + g(x)\big), \qquad
        \min\; \text{LogLoss} + \lambda \sum_k (b_k - b_{k+1})_+ + \tfrac{\text{wd}}{2} \lVert\theta_g\rVert^2

    :math:`\eta` is :class:`~gpucal.neural.piecewise.PiecewiseLogitCalibrator`'s map of the logit
    :math:`l` (knots at quantiles of the calibration logits, knot values learnt, ILPS penalty);
    :math:`g(x)` reads one embedding per field value (numeric fields cut into quantile bins, everything
    else by value: :class:`~gpucal.encoding.FeatureEncoder`), concatenates them and passes them through
    an MLP with one ReLU hidden layer to one output. The base model is untouched: only its score is read.
    :math:`\eta` is monotone, so within one combination of field values the calibrated probabilities keep
    the score's order.

    Parameters
    ----------
    score_col : str, default="score"
        Column of ``X`` holding the score.
    feature_cols : list of hashable, str or None, default=None
        Feature columns (the fields); None means every column but ``score_col``, the label (a column named
        like ``y`` or holding its values), the weights and ``p_true`` (``gpucal.encoding.features``); a
        feature that is the label is refused.
    categorical_cols : list of hashable, str or None, default=None
        Numeric feature columns to read by value instead of by quantile bins. None: integer columns with few
        distinct values (at most one per 20 rows, 50,000 at most) are read by value, other numbers binned
        (``FeatureEncoder``); ``[]``: every number binned.
    n_bins : int, default=32
        Most quantile bins per numeric feature.
    interactions : list of pairs of feature columns, "auto", "all" or None, default=None
        Pairs of features crossed into one more field each (:mod:`gpucal.encoding.crosses`: the pair's
        combined values, numbers through their bins, rare and unseen pairs pooled), with an embedding per
        combination: the MLP sees combinations already, but only through the sum of the pair's
        embeddings, and a cross lets a combination seen often enough move on its own:

        - None: the fields only;
        - a list of pairs: those crosses (a pair naming an unknown column, a column with itself, or an
          entry of one column raises ``ValueError`` naming it);
        - ``"all"``: every pair of features;
        - ``"auto"``: the pairs feature-aware Platt's ``interactions="auto"`` keeps (every pair screened by
          the expected held-out gain of a one-step fit of its cross on the first-order feature-aware Platt
          model: :func:`~gpucal.calibrators.feature_platt.resolve_interactions`; one first-order fit),
          screened on the training rows alone (the held-out rows judge the network, its crosses too).

        The pairs crossed are ``interactions_``.
    min_cross_count : float, default=10.0
        Least weight of a cross level with a code of its own (``min_value_rows`` then decides which
        get an embedding).
    max_cross_levels : int, default=100000
        Most codes of all crosses together; pairs past it are dropped with a ``UserWarning`` naming them.
    embedding_dim : int, default=8
        Size of each field value's embedding.
    hidden_units : int, default=32
        Width of the MLP's hidden layer; 0 makes :math:`g` linear in the embeddings (with
        ``embedding_dim=1``, the feature-aware Platt model's field offsets).
    min_value_rows : int, default=50
        A field value needs this many fit rows for an embedding of its own; rarer values, and values not
        seen at fit time, share the field's learnt *unknown* embedding.
    weight_decay : float, default=1e-4
        L2 penalty :math:`\tfrac{1}{2}\,\text{weight\_decay}\,\lVert\theta\rVert^2` on the field
        network's weights, against the *mean* log-loss (Adam's coupled weight decay; not on the knots).
        Coupled, not AdamW's decoupled decay: Adam moves every weight by about the learning rate whatever
        its gradient, so a value seen in a few rows, all negative, drifts without bound unless the
        penalty is part of the gradient; on ``make_ctr`` data decoupled decay overfitted from the second
        epoch on.
    learning_rate : float, default=0.01
        Adam step size.
    n_knots : int, default=32
        Number of bins of the logit for :math:`\eta` (``K + 1`` knots at quantiles, fewer with ties), at
        most ``gpucal.neural.piecewise.MAX_KNOTS``.
    monotone_penalty : float, default=1.0
        :math:`\lambda` of the ILPS penalty, against the weighted mean log-loss; 0 leaves :math:`\eta` free.
    batch_size : int or None, default=None
        Rows per Adam step; None: about 64 steps per epoch, batches of 256 to 4,096 rows.
    max_epochs : int, default=100
        Most passes over the training rows.
    patience : int, default=3
        Epochs in a row without a lower validation log-loss before the training stops.
    validation_fraction : float in [0, 1), default=0.1
        Share of the rows (seeded, random) held out for early stopping; 0 trains ``max_epochs`` epochs on
        every row and keeps the last, as does a draw that leaves the held-out or the training rows
        without weight, or the training rows with one class only.
    seed : int, default=0
        Seeds the validation rows, the batch order and the initialisation.
    n_threads : int, default=1
        PyTorch CPU threads during the fit (restored afterwards); part of what makes a fit reproducible.
    device : {"auto", "cpu", "gpu"}, default="auto"
        Where the fit runs; "auto" trains on CUDA when the data is on the GPU (cupy / cudf). Predictions
        run where the data is.
    score_kind : {"probability", "logit"}, default="probability"
        Probabilities (used through their logit) or raw margins.
    output_type : str, default="input"
        Family of the returned predictions (see ``gpucal._frames``).

    Attributes
    ----------
    encoder_ : dict
        The fitted :class:`~gpucal.encoding.FeatureEncoder` as plain data.
    knots_x_, knots_y_ : numpy.ndarray of shape (m,)
        The knots of :math:`\eta` (logits); ``knots_y_`` non-decreasing when ``monotone_penalty > 0``.
    code_rows_ : numpy.ndarray of int64, shape (sum of the encoder's ``n_codes_``,)
        Embedding-table row of each code, features in order, then the crosses.
    interactions_ : list of [str, str]
        The crossed pairs, fields after the columns (empty without crosses).
    embedding_ : numpy.ndarray of shape (n_table_rows, embedding_dim)
        Every field's embeddings stacked, each field's block ending with its unknown row.
    layers_ : list of dict
        The MLP's layers, ``{"weight": (out, in) list of lists, "bias": list}``, input first.
    monotone_violation_ : float
        Largest :math:`b_k - b_{k+1}` the optimiser returned, before the final pooling.
    n_epochs_, best_epoch_ : int
        Epochs run; epoch whose weights were kept.

    See Also
    --------
    PiecewiseLogitCalibrator : :math:`\eta` alone.
    FeatureAwarePlattCalibrator : logistic regression on the logit and one-hot field values.

    Notes
    -----
    *Prediction and loading need no PyTorch.* The fitted network is a handful of arrays stored in the
    JSON state, and ``predict`` runs its forward pass in numpy (cupy for GPU data): a model trained on a
    GPU machine serves on a CPU-only one, and ``gpucal.load`` never builds a torch module. The tests
    check that forward pass against torch's functions on the stored weights (float32 training, float64
    prediction).

    *Training.* :math:`\eta` alone is first solved on the training rows (at most 16,384 of them, seeded;
    L-BFGS, as
    :class:`~gpucal.neural.piecewise.PiecewiseLogitCalibrator`), and :math:`g` starts at 0, so the joint
    training starts from the best 1-D map. Then Adam on mini-batches; an exponential moving average of the
    weights (over about the last 50 steps) is what the validation rows judge and what is kept, since the
    raw iterates jitter by about the learning rate; an epoch without improvement sends the weights back
    to the best epoch's and halves the learning rate.

    *Reproducibility.* The validation rows, the batch order and the initialisation come from ``seed``
    (a private ``torch.Generator``: the global RNG is neither read nor moved); the fit runs with
    ``n_threads`` PyTorch threads, restored afterwards. Two fits with the same data and parameters give
    the same bits on the CPU. On CUDA the embedding's backward pass adds with atomics, so bits may differ
    between runs there.

    *Data handover.* cupy and cudf inputs reach torch by DLPack, on the GPU, without a host copy.

    Sample weights weight each row's log-loss (each batch's weighted sum divided by its weight).

    References
    ----------
    .. [1] F. Pan, X. Ao, P. Tang, M. Lu, D. Liu, L. Xiao, Q. He, "Field-aware calibration: a simple and
       empirically strong method for reliable probabilistic predictions", Proc. WWW 2020, 729-739.

    Examples
    --------
    A model that misses a per-site bias of the logit (-0.5, 0, +0.5); ``g`` learns it back.

    >>> import numpy as np, pandas as pd
    >>> rng = np.random.default_rng(0)
    >>> site = rng.integers(0, 3, 20_000)
    >>> logit = rng.normal(-1.0, 1.0, 20_000)
    >>> y = (rng.uniform(size=20_000) < 1 / (1 + np.exp(-logit))).astype(float)
    >>> score = 1 / (1 + np.exp(-(logit - np.array([-0.5, 0.0, 0.5])[site])))
    >>> X = pd.DataFrame({"score": score, "site": site})
    >>> cal = FieldAwareCalibrator(categorical_cols=["site"]).fit(X, y)
    >>> g = cal.field_bias(X)
    >>> learnt = np.array([g[site == s].mean() - g[site == 1].mean() for s in range(3)])
    >>> bool(np.all(np.abs(learnt - [-0.5, 0.0, 0.5]) < 0.15))
    True
    """

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "n_knots": Interval(int, 1, MAX_KNOTS),
        "monotone_penalty": Interval(float, 0, None),
        "learning_rate": Interval(float, 0, None, closed="neither"),
        "batch_size": Interval(int, 1, None, allow_none=True),
        "max_epochs": Interval(int, 1, None),
        "patience": Interval(int, 1, None),
        "validation_fraction": Interval(float, 0, 1, closed="left"),
        "seed": Interval(int, 0, MAX_TORCH_SEED),
        "n_threads": Interval(int, 1, MAX_TORCH_THREADS),
        "device": Options("auto", "cpu", "gpu"),
        "score_kind": SCORE_KIND_OPTIONS,
        "output_type": OUTPUT_TYPE_OPTIONS,
        "n_bins": Interval(int, 1, None),
        "embedding_dim": Interval(int, 1, None),
        "hidden_units": Interval(int, 0, None),
        "min_value_rows": Interval(int, 1, None),
        "weight_decay": Interval(float, 0, None),
        "min_cross_count": Interval(float, 0, None),
        "max_cross_levels": Interval(int, 1, None),
    }
    _state_spec: ClassVar[dict[str, str]] = {
        "encoder_": "json",
        "knots_x_": "float_array",
        "knots_y_": "float_array",
        "code_rows_": "int_array",
        "embedding_": "float_matrix",
        "layers_": "json",
        "monotone_violation_": "float",
        "n_epochs_": "int",
        "best_epoch_": "int",
    }

    def __init__(
        self,
        *,
        score_col: str = "score",
        feature_cols: Sequence[Hashable] | str | None = None,
        categorical_cols: Sequence[Hashable] | str | None = None,
        n_bins: int = 32,
        interactions: Sequence[Sequence[Hashable]] | str | None = None,
        min_cross_count: float = MIN_CROSS_COUNT,
        max_cross_levels: int = MAX_CROSS_LEVELS,
        embedding_dim: int = 8,
        hidden_units: int = 32,
        min_value_rows: int = 50,
        weight_decay: float = 1e-4,
        n_knots: int = 32,
        monotone_penalty: float = 1.0,
        learning_rate: float = 0.01,
        batch_size: int | None = None,
        max_epochs: int = 100,
        patience: int = 3,
        validation_fraction: float = 0.1,
        seed: int = 0,
        n_threads: int = 1,
        device: str = "auto",
        score_kind: str = "probability",
        output_type: str = "input",
    ) -> None:
        self.score_col = score_col
        self.feature_cols = feature_cols
        self.categorical_cols = categorical_cols
        self.n_bins = n_bins
        self.interactions = interactions
        self.min_cross_count = min_cross_count
        self.max_cross_levels = max_cross_levels
        self.embedding_dim = embedding_dim
        self.hidden_units = hidden_units
        self.min_value_rows = min_value_rows
        self.weight_decay = weight_decay
        self.n_knots = n_knots
        self.monotone_penalty = monotone_penalty
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.validation_fraction = validation_fraction
        self.seed = seed
        self.n_threads = n_threads
        self.device = device
        self.score_kind = score_kind
        self.output_type = output_type

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> FieldAwareCalibrator:
        """Fit on the score and feature columns of ``X``, labels ``y`` and optional row weights.

        Parameters
        ----------
        X : dataframe or dict of columns
            Holds ``score_col`` and the feature columns (pandas, polars, pyarrow, cudf).
        y : array-like of shape (n,)
            Labels in {0, 1}; soft labels in [0, 1] count as that fraction of a positive.
        sample_weight : array-like of shape (n,), default=None
            Non-negative row weights; None means one per row.

        Returns
        -------
        self
        """
        reject_dask(self, X, y, sample_weight)
        self._validate_params()
        require_torch(type(self).__name__)  # before any work: the install hint names this class
        given = as_rows(X=X, y=y, sample_weight=sample_weight)
        feature_cols = resolve_feature_cols(
            given,
            X,
            y,
            sample_weight,
            score_col=self.score_col,
            feature_cols=self.feature_cols,
        )
        split = parse_input(
            X,
            score_col=self.score_col,
            feature_cols=feature_cols,
            score_kind=self.score_kind,
            require_features=True,
        )
        labels = check_labels(y, "y")
        n_rows = check_consistent_length(X=split.score, y=labels)
        weights = check_sample_weight(sample_weight, n_rows, xp=array_namespace(labels))
        held_out = validation_mask(n_rows, float(self.validation_fraction), int(self.seed), weights, labels)
        if held_out is not None and isinstance(self.interactions, str) and self.interactions == "auto":
            # The crosses are chosen on the training rows: the held-out rows judge the network, the
            # structure included (rows of zero weight take no part in the screen's fit).
            kept = array_namespace(weights).asarray(~held_out)
            given = as_rows(X=X, y=y, sample_weight=weights * kept)
        encoding = encoder_params(
            self, type(self).__name__, given, list(split.features), score_kind=self.score_kind
        )
        encoder = FeatureEncoder(**encoding)
        codes = encoder.fit_transform(split.features, sample_weight=sample_weight)
        code_rows, counts = field_vocabulary(codes, encoder.n_codes_, int(self.min_value_rows), weights)
        rows = embedding_rows(codes, code_rows, encoder.n_codes_)
        spec = FieldNetSpec(
            n_rows=int(code_rows.max()) + 1,
            n_fields=codes.shape[1],
            dim=int(self.embedding_dim),
            hidden_units=int(self.hidden_units),
        )
        x = score_feature(split.score, self.score_kind)
        with training_torch(int(self.n_threads)):
            eta, result = self._train(x, labels, weights, rows, held_out, spec)
        trained = trained_counts(codes, encoder.n_codes_, held_out, weights)
        code_rows = untrained_to_unknown(code_rows, encoder.n_codes_, trained)
        self.encoder_ = encoder.to_dict()
        self._encoder = encoder
        self.code_rows_ = code_rows
        self.knots_x_ = eta.knots_x
        self.knots_y_ = eta.knots_y
        self.monotone_violation_ = eta.violation
        self.n_epochs_ = result.n_epochs
        self.best_epoch_ = result.best_epoch
        self.embedding_ = fill_unknown_rows(result.embedding, code_rows, encoder.n_codes_, counts, trained)
        self.interactions_ = [list(pair) for pair in encoder.interactions_]
        self.layers_ = [{"weight": w.tolist(), "bias": b.tolist()} for w, b in result.layers]
        self._layers = result.layers
        return self

    def _train(
        self, x: Any, y: Any, w: Any, rows: Any, held_out: np.ndarray | None, spec: FieldNetSpec
    ) -> Any:
        """Fit eta alone on the training rows (the start), then eta and g together by mini-batch Adam."""
        what = type(self).__name__
        training = load_training(what)
        train = _on_device_of(x, start_rows(x.shape[0], held_out, int(self.seed), y, w))
        start = fit_eta(
            x[train],
            y[train],
            w[train],
            n_knots=int(self.n_knots),
            monotone_penalty=float(self.monotone_penalty),
            max_iter=START_MAX_ITER,
            tol=START_TOL,
            device=self.device,
            what=what,
            polish=False,  # the joint training moves the knots again; polishing was 30% of a small fit
        )
        k, t = knot_coordinates(x, start.knots_x)
        device = torch_device(self.device, x)
        # The loss is a weighted mean: weights scaled to a mean of 1 give the same fit and stay inside
        # float32's range (weights of 1e39 overflowed to inf, of 1e-46 to 0).
        unit_mean = w / float(w.mean())
        result = training.train(
            k=as_tensor(k, device, "int64"),
            t=as_tensor(t, device, "float32"),
            rows=as_tensor(rows, device, "int64"),
            y=as_tensor(y, device, "float32"),
            w=as_tensor(unit_mean, device, "float32"),
            validation=None if held_out is None else as_tensor(held_out, device, "bool"),
            init_knots=start.knots_y,
            spec=spec,
            monotone_penalty=float(self.monotone_penalty),
            learning_rate=float(self.learning_rate),
            weight_decay=float(self.weight_decay),
            batch_size=self.batch_size,
            max_epochs=int(self.max_epochs),
            patience=int(self.patience),
            seed=int(self.seed),
        )
        eta = finish_eta(start.knots_x, result.knots_y, k, t, w, float(self.monotone_penalty), 0)
        return eta, result

    def _predict_local(self, X: Any) -> tuple[Any, InputInfo]:
        encoder, split = self._parse_features(X, allow_empty=True)
        codes = encoder.transform(split.features)
        x = score_feature(split.score, self.score_kind)
        rows = embedding_rows(codes, self.code_rows_, encoder.n_codes_)
        z = eta_logit(x, self.knots_x_, self.knots_y_) + field_term(rows, self.embedding_, self._network())
        return sigmoid(z), split.info

    def field_bias(self, X: Any) -> Any:
        """Return :math:`g(x)` per row of ``X`` (a numpy or cupy array): the learnt field term, a logit."""
        check_is_fitted(self, list(self._state_spec))
        encoder, split = self._parse_features(X)
        rows = embedding_rows(encoder.transform(split.features), self.code_rows_, encoder.n_codes_)
        return field_term(rows, self.embedding_, self._network())

    def _network(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The MLP's ``(weight, bias)`` float64 arrays, from ``layers_`` (converted once)."""
        layers: list[tuple[np.ndarray, np.ndarray]] | None = getattr(self, "_layers", None)
        if layers is None:
            self._check_state()
            layers = self._layers
        return layers

    def _check_state(self) -> None:
        """Check the loaded state (``gpucal.load`` calls this): encoder, knots, table and layer shapes."""
        encoder = FeatureEncoder.from_dict(self.encoder_)
        check_knots(self.knots_x_, self.knots_y_)
        self.interactions_ = [list(pair) for pair in encoder.interactions_]  # derived, not saved
        n_codes = int(encoder.n_codes_.sum())
        code_rows = np.asarray(self.code_rows_)
        table = np.asarray(self.embedding_, dtype=np.float64)
        if code_rows.shape != (n_codes,):
            msg = f"code_rows_ has {code_rows.shape[0]} entries; the encoder has {n_codes} codes"
            raise ValueError(msg)
        if table.ndim != 2 or code_rows.min() < 0 or code_rows.max() >= table.shape[0]:
            msg = f"code_rows_ points outside embedding_ ({table.shape[0]} rows)"
            raise ValueError(msg)
        if not np.isfinite(table).all():
            msg = "embedding_ holds non-finite numbers"
            raise ValueError(msg)
        layers = _checked_layers(self.layers_, encoder.n_codes_.shape[0] * table.shape[1])
        check_field_term_bound(table, layers)
        self._layers = layers
        self._encoder = encoder


def check_field_term_bound(table: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> None:
    r"""Raise ``ValueError`` unless the loaded network's :math:`|g(x)|` stays below
    :data:`~gpucal.persistence.MAX_TERM` for any row: the bound of every unit, layer by layer,

    .. math::

        u_0 = \max |E|\, \mathbf 1, \qquad u_{l+1} = |W_l|\, u_l + |b_l|

    (ReLU does not grow a value's size), must be finite throughout and below it at the output. Finite
    entries alone let embeddings of 1e300 through weights of 1e10 reach inf - inf: NaN for every row.
    """
    width = layers[0][0].shape[1]
    bound = np.full(width, float(np.abs(table).max()) if table.size else 0.0)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is what is checked for
        for weight, bias in layers:
            bound = np.abs(weight) @ bound + np.abs(bias)
            if not np.isfinite(bound).all():
                break
    if not (np.isfinite(bound).all() and float(bound.max()) < MAX_TERM):
        msg = f"embedding_ and layers_ can give a field term past {MAX_TERM:g} in size, past any fitted one"
        raise ValueError(msg)


def _checked_layers(layers: Any, width: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Check the MLP read from a file: a list of ``{"weight", "bias"}`` whose shapes chain to one output."""
    if not isinstance(layers, list) or not layers:
        msg = "layers_ must be a non-empty list of {'weight', 'bias'}"
        raise ValueError(msg)
    out = []
    for i, layer in enumerate(layers):
        if not isinstance(layer, dict) or set(layer) != {"weight", "bias"}:
            msg = f"layers_[{i}] must be a dict with keys 'weight' and 'bias'"
            raise ValueError(msg)
        if not (plain_numbers(layer["weight"], 2) and plain_numbers(layer["bias"], 1)):
            msg = f"layers_[{i}] must hold lists of numbers (no booleans, strings or nulls)"
            raise ValueError(msg)
        try:
            weight = np.asarray(layer["weight"], dtype=np.float64)
            bias = np.asarray(layer["bias"], dtype=np.float64)
        except (TypeError, ValueError):
            msg = f"layers_[{i}] is not a rectangular array of numbers"
            raise ValueError(msg) from None
        if weight.ndim != 2 or weight.shape[1] != width or bias.shape != (weight.shape[0],):
            msg = f"layers_[{i}]: weight {weight.shape}, bias {bias.shape}; expected (k, {width}) and (k,)"
            raise ValueError(msg)
        if not (np.isfinite(weight).all() and np.isfinite(bias).all()):
            msg = f"layers_[{i}] holds non-finite numbers"
            raise ValueError(msg)
        out.append((weight, bias))
        width = weight.shape[0]
    if width != 1:
        msg = f"the last layer has {width} outputs; expected 1"
        raise ValueError(msg)
    return out


__all__ = [
    "FieldAwareCalibrator",
    "check_field_term_bound",
    "embedding_rows",
    "field_term",
    "field_vocabulary",
    "untrained_to_unknown",
]
