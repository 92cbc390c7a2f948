r"""The NeuCalib network and its training loop (PyTorch; reached only through ``_torch.load_training``).

.. math::

    q(l, x) = \sigma\big(\eta(l) + g(x)\big), \qquad
    \mathcal{L} = \frac{\sum_i w_i\, \ell\big(y_i, \eta(l_i) + g(x_i)\big)}{\sum_i w_i}
        + \lambda \sum_k (b_k - b_{k+1})_+

(the ILPS loss of the field-aware calibration notes, section "解决方案", the solution, plus the field
term), with :math:`\ell` the log-loss on the logit and :math:`\eta` the piecewise-linear map through the knots
:math:`(a_k, b_k)`: a row in bin :math:`k` at fraction :math:`t = (l - a_k) / (a_{k+1} - a_k)` (clipped to
[0, 1], which makes :math:`\eta` constant beyond the end knots) gets :math:`b_k + t\,(b_{k+1} - b_k)`.
The knot values :math:`b_k` are the parameters themselves, so the penalty is the paper's, term for term.
:math:`g` is one embedding table (every field's rows stacked) read at one row per field, concatenated,
then an MLP with one ReLU hidden layer (or none) to one output.

Training (:func:`train`): Adam, the knots without weight decay (decay would pull the map toward logit
0), the field network with a coupled L2 penalty (Adam's ``weight_decay``); mini-batches in an order drawn
from a seeded ``torch.Generator`` (never the global RNG); an exponential moving average of the weights is
what is evaluated and returned. After each epoch the weighted log-loss of the validation rows is
measured on the average: an epoch that does not lower it sends the weights back to the best epoch's and
halves the learning rate, ``patience`` such epochs in a row stop the training, and the best epoch's
weights are returned. :math:`\eta` alone is solved by full-batch L-BFGS instead (:func:`fit_knots`).
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from gpucal.neural.field_aware import FieldNetSpec

# Initial spread of the embeddings (a normal's s.d.; PyTorch's default): g still starts at 0 (zero output
# layer), and hidden activations of order 1 let it reach a field bias of order 1 in a few epochs (with 0.1
# it learnt too slowly, and early stopping caught it shrunk).
EMBEDDING_INIT_SD = 1.0
# An epoch counts as an improvement only when the validation loss drops by this much (relative).
IMPROVEMENT_RTOL = 1e-6
# fit_knots restarts L-BFGS while a round lowers the loss by more than this (relative).
RESTART_RTOL = 1e-12
# After L-BFGS, this many full-batch Adam steps, the step size decaying from POLISH_LR[0] to POLISH_LR[1].
POLISH_STEPS = 200
POLISH_LR = (1e-2, 1e-4)
# batch_size=None: about this many steps per epoch, batches of MIN_AUTO_BATCH to MAX_AUTO_BATCH rows.
STEPS_PER_EPOCH = 64
MIN_AUTO_BATCH = 256
MAX_AUTO_BATCH = 4096
# Decay per step of the moving average of the weights (about the last 1 / (1 - decay) steps count).
AVERAGE_DECAY = 0.98
# After an epoch without improvement the learning rate is multiplied by this: Adam's steps keep a size of
# about the learning rate even at the optimum, so the knots settle only as it shrinks.
PLATEAU_DECAY = 0.5


@dataclass(frozen=True)
class TrainResult:
    """Fitted arrays (float64, host) and the course of the training."""

    knots_y: np.ndarray
    embedding: np.ndarray | None
    layers: list[tuple[np.ndarray, np.ndarray]]
    n_epochs: int
    best_epoch: int
    history: list[float]


class NeuCalibNet(nn.Module):
    """``eta(l) + g(x)`` on precomputed knot coordinates ``(k, t)`` and embedding rows."""

    def __init__(self, init_knots: np.ndarray, spec: FieldNetSpec | None, generator: torch.Generator) -> None:
        super().__init__()
        self.knots = nn.Parameter(torch.as_tensor(np.asarray(init_knots, dtype=np.float32)).clone())
        self.spec = spec
        if spec is None:
            return
        # float32 whatever torch's default dtype: the caller's set_default_dtype would change the draws
        # below and the precision of every step.
        self.embedding = nn.Embedding(spec.n_rows, spec.dim, dtype=torch.float32)
        width = spec.n_fields * spec.dim
        layers: list[nn.Module] = []
        if spec.hidden_units > 0:
            layers += [nn.Linear(width, spec.hidden_units, dtype=torch.float32), nn.ReLU()]
            width = spec.hidden_units
        self.output = nn.Linear(width, 1, dtype=torch.float32)
        self.hidden = nn.Sequential(*layers)
        self._initialise(generator)

    @torch.no_grad()
    def _initialise(self, generator: torch.Generator) -> None:
        """Seeded initialisation; the output layer starts at zero, so training starts from ``g = 0``."""
        weight = self.embedding.weight
        weight.copy_(torch.randn(weight.shape, generator=generator, dtype=torch.float32) * EMBEDDING_INIT_SD)
        for layer in self.hidden:
            if isinstance(layer, nn.Linear):  # PyTorch's default: uniform(+-1/sqrt(fan_in))
                bound = 1.0 / math.sqrt(layer.in_features)
                uniform = functools.partial(torch.rand, generator=generator, dtype=torch.float32)
                layer.weight.copy_((uniform(layer.weight.shape) * 2 - 1) * bound)
                layer.bias.copy_((uniform(layer.bias.shape) * 2 - 1) * bound)
        self.output.weight.zero_()
        self.output.bias.zero_()

    def eta(self, k: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Piecewise-linear map through the knots: ``b_k + t (b_{k+1} - b_k)``."""
        low = self.knots[k]
        high = self.knots[torch.clamp(k + 1, max=self.knots.shape[0] - 1)]
        return low + t * (high - low)

    def field_term(self, rows: torch.Tensor) -> torch.Tensor:
        """``g(x)``: the rows' embeddings, concatenated, through the MLP.

        ``index_select`` rather than the embedding's own forward: the same values, and on the CPU its
        backward (an ``index_add``) took half the time of the embedding's (a sort of the indices).
        """
        h = torch.index_select(self.embedding.weight, 0, rows.reshape(-1)).reshape(rows.shape[0], -1)
        return self.output(self.hidden(h)).reshape(-1)

    def forward(self, k: torch.Tensor, t: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        z = self.eta(k, t)
        if rows is not None and self.spec is not None:
            z = z + self.field_term(rows)
        return z

    def monotone_penalty(self) -> torch.Tensor:
        """ILPS: ``sum_k max(b_k - b_{k+1}, 0)``."""
        return torch.relu(self.knots[:-1] - self.knots[1:]).sum()


def auto_batch_size(n_train: int) -> int:
    """Rows per step when none is given: about ``STEPS_PER_EPOCH`` steps per epoch, within the bounds.

    Early stopping and the learning-rate decay act once per epoch; an epoch of a few large steps on a
    small calibration set would let validation noise stop the fit before the weights have moved.
    """
    return int(min(MAX_AUTO_BATCH, max(MIN_AUTO_BATCH, n_train // STEPS_PER_EPOCH)))


def _weighted_log_loss(z: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Weighted mean log-loss; 0 (and no gradient) for rows that weigh nothing, not 0/0 = NaN."""
    loss = nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none")
    return (w * loss).sum() / w.sum().clamp_min(torch.finfo(w.dtype).tiny)


def _batch_log_loss(z: torch.Tensor, y: torch.Tensor, w: torch.Tensor, mean_weight: float) -> torch.Tensor:
    """A batch's estimate of the training rows' weighted mean log-loss: its weighted sum over its rows
    times ``mean_weight``, the training rows' mean weight.

    Not over the batch's own weight: a batch that drew only light rows would weigh them as much as a
    batch of heavy ones (rows of weight 1e-9 pulled the fit as far as rows of weight 1 in the batches
    they filled).
    """
    loss = nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none")
    return (w * loss).sum() / (w.shape[0] * mean_weight)


def train(
    *,
    k: torch.Tensor,
    t: torch.Tensor,
    rows: torch.Tensor | None,
    y: torch.Tensor,
    w: torch.Tensor,
    validation: torch.Tensor | None,
    init_knots: np.ndarray,
    spec: FieldNetSpec | None,
    monotone_penalty: float,
    learning_rate: float,
    weight_decay: float,
    batch_size: int | None,
    max_epochs: int,
    patience: int,
    seed: int,
) -> TrainResult:
    """Fit the knot values (and the field network when ``spec`` is given); return the best epoch's weights.

    ``k``, ``t``, ``rows``, ``y``, ``w`` hold every row (on one device); ``validation`` is a boolean mask of
    the rows held out for early stopping (None: train on all rows for ``max_epochs`` epochs).
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):  # nn.Linear's constructor draws from the global RNG
        net = NeuCalibNet(init_knots, spec, generator).to(k.device)
    groups = [{"params": [net.knots], "weight_decay": 0.0}]
    if spec is not None:
        field_params = [p for name, p in net.named_parameters() if name != "knots"]
        groups.append({"params": field_params, "weight_decay": weight_decay})
    optimizer = torch.optim.Adam(groups, lr=learning_rate, foreach=True)

    def take(mask_or_index: torch.Tensor) -> tuple[Any, ...]:
        part_rows = None if rows is None else rows[mask_or_index]
        return k[mask_or_index], t[mask_or_index], part_rows, y[mask_or_index], w[mask_or_index]

    train_index = torch.arange(k.shape[0], device=k.device)
    held_out = None
    if validation is not None:
        train_index = train_index[~validation]
        held_out = take(validation)
    n_train = int(train_index.shape[0])
    size = auto_batch_size(n_train) if batch_size is None else min(batch_size, n_train)
    mean_weight = float(w[train_index].mean())

    # The weights evaluated and returned are an exponential moving average of the iterates (Polyak
    # averaging): Adam's mini-batch iterates jitter by about the learning rate around the optimum, and
    # the average does not; early stopping on the raw iterates picked a lucky early one.
    average = copy.deepcopy(net)
    best_loss, best_epoch, best_state = math.inf, 0, copy.deepcopy(net.state_dict())
    history: list[float] = []
    epoch = 0
    means: list[torch.Tensor] = list(average.parameters())
    currents: list[torch.Tensor] = list(net.parameters())
    for epoch in range(1, max_epochs + 1):
        net.train()
        # One gather per epoch, then contiguous batches: a gather per batch cost as much again.
        shuffled = take(train_index[torch.randperm(n_train, generator=generator).to(k.device)])
        for start in range(0, n_train, size):
            batch: list[Any] = [None if a is None else a[start : start + size] for a in shuffled]
            kb, tb, rb, yb, wb = batch
            optimizer.zero_grad(set_to_none=True)
            loss = _batch_log_loss(net(kb, tb, rb), yb, wb, mean_weight)
            if monotone_penalty > 0:
                loss = loss + monotone_penalty * net.monotone_penalty()
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                torch._foreach_lerp_(means, currents, 1.0 - AVERAGE_DECAY)
        if held_out is None:
            best_epoch, best_state = epoch, copy.deepcopy(average.state_dict())
            continue
        with torch.no_grad():
            kv, tv, rv, yv, wv = held_out
            val_loss = float(_weighted_log_loss(average(kv, tv, rv), yv, wv))
        history.append(val_loss)
        if best_epoch == 0 or val_loss < best_loss - IMPROVEMENT_RTOL * abs(best_loss):
            best_loss, best_epoch, best_state = val_loss, epoch, copy.deepcopy(average.state_dict())
        elif epoch - best_epoch >= patience:
            break
        else:  # back to the best weights, with smaller steps
            net.load_state_dict(best_state)
            average.load_state_dict(best_state)
            for group in optimizer.param_groups:
                group["lr"] *= PLATEAU_DECAY
    net.load_state_dict(best_state)
    return _result(net, epoch, best_epoch, history)


def fit_knots(
    *,
    k: torch.Tensor,
    t: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor,
    init_knots: np.ndarray,
    monotone_penalty: float,
    max_iter: int,
    tol: float,
    polish: bool = True,
) -> tuple[np.ndarray, int]:
    r"""Fit the knot values alone by full-batch L-BFGS on the ILPS loss; return them and the iterations.

    ``polish``: finish with :func:`_polish` (False: the L-BFGS iterate, for a start that is trained on).

    :math:`\eta` alone has ``K + 1`` parameters and a convex loss (the log-loss of a linear function of
    the knots plus a sum of hinges), so it is solved to a tolerance rather than early-stopped: nothing
    can overfit that a held-out split would catch, and mini-batch steps would leave noise of the size of
    the learning rate in the knots. float64 throughout (the problem is small).
    """
    with torch.random.fork_rng(devices=[]):
        net = NeuCalibNet(init_knots, None, torch.Generator()).to(device=k.device, dtype=torch.float64)
    t, y, w = (a.to(torch.float64) for a in (t, y, w))

    def objective() -> torch.Tensor:
        loss = _weighted_log_loss(net.eta(k, t), y, w)
        if monotone_penalty > 0:
            loss = loss + monotone_penalty * net.monotone_penalty()
        return loss

    n_iter = 0
    with torch.no_grad():
        loss = float(objective())
    # L-BFGS's curvature pairs go stale across a kink of the penalty and its line search then stops
    # early; a fresh start from the last iterate continues, until a round no longer lowers the loss.
    while n_iter < max_iter:
        optimizer = torch.optim.LBFGS(
            [net.knots],
            lr=1.0,
            max_iter=max_iter - n_iter,
            tolerance_grad=tol,
            tolerance_change=0.0,
            history_size=20,
            line_search_fn="strong_wolfe",
        )

        def closure(optimizer: torch.optim.LBFGS = optimizer) -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            value = objective()
            value.backward()
            return value

        optimizer.step(closure)
        n_iter += max(int(optimizer.state[net.knots].get("n_iter", 0)), 1)
        with torch.no_grad():
            previous, loss = loss, float(objective())
        if not loss < previous - RESTART_RTOL * abs(previous):
            break
    return (_polish(net, objective) if polish else _host(net.knots)), n_iter


def _polish(net: NeuCalibNet, objective: Any) -> np.ndarray:
    """Finish with full-batch Adam steps of decaying size; return the knots of the lowest loss seen.

    L-BFGS stalls where the penalty's kinks are active (ties of the knot values, often at many knots with
    dozens of bins); subgradient steps whose size shrinks to ``POLISH_LR[1]`` settle there. On make_ctr
    and KDD data this lowered the loss L-BFGS stopped at in every case tried.
    """
    optimizer = torch.optim.Adam([net.knots], lr=POLISH_LR[0])
    with torch.no_grad():
        best_loss, best = float(objective()), net.knots.detach().clone()
    for step in range(POLISH_STEPS):
        cosine = 0.5 * (1.0 + math.cos(math.pi * step / POLISH_STEPS))
        optimizer.param_groups[0]["lr"] = POLISH_LR[1] + (POLISH_LR[0] - POLISH_LR[1]) * cosine
        optimizer.zero_grad(set_to_none=True)
        loss = objective()
        loss.backward()
        value = float(loss.detach())
        if value < best_loss:  # the loss of the knots before this step
            best_loss, best = value, net.knots.detach().clone()
        optimizer.step()
    with torch.no_grad():
        if float(objective()) < best_loss:
            best = net.knots.detach().clone()
    return _host(best)


def _host(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float64).numpy()


def _result(net: NeuCalibNet, n_epochs: int, best_epoch: int, history: list[float]) -> TrainResult:
    if net.spec is None:
        return TrainResult(_host(net.knots), None, [], n_epochs, best_epoch, history)
    layers = [
        (_host(layer.weight), _host(layer.bias))
        for layer in [*net.hidden, net.output]
        if isinstance(layer, nn.Linear)
    ]
    return TrainResult(_host(net.knots), _host(net.embedding.weight), layers, n_epochs, best_epoch, history)
