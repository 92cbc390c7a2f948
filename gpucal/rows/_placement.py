"""Where the blocks of dask rows live: persisting them, and one task per worker pinned to its holder.

A fit that passes over its rows many times (a tree per level, Newton per step) keeps them where they
were read: :func:`persist` computes the partitions on the workers and leaves them there, and
:func:`per_worker` concatenates each worker's partitions there (one store per worker), so a later pass
ships one small result per worker whatever the number of partitions. Without a ``distributed`` client
(dask's local schedulers) every partition is one group with no address.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def persist(tasks: Sequence[Any]) -> list[Any]:
    """Compute the delayed ``tasks`` where they run and keep the results there (``dask.persist``)."""
    import dask

    return list(dask.persist(*tasks))


def map_persisted(fn: Callable[..., Any], parts: Sequence[Any], *args: Any) -> list[Any]:
    """Return ``fn(part, *args)`` for every delayed partition, computed and kept on the workers."""
    import dask

    task = dask.delayed(fn, pure=False)  # fresh keys: no hashing of the arguments (models, trees)
    return persist([task(part, *args) for part in parts])


def _client() -> Any:
    """The active ``distributed`` client, or None (no client: dask's local schedulers)."""
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed is installed with gpucal's dask extra
        return None
    try:
        return default_client()
    except ValueError:
        return None


def _future_of(part: Any) -> Any:
    """The future holding a persisted delayed partition on the cluster, or None (not on a cluster)."""
    from distributed import futures_of

    return next((f for f in futures_of(part) if f.key == part.key), None)


def worker_addresses() -> list[str]:
    """The addresses of the active ``distributed`` client's workers, sorted (empty without a client)."""
    client = _client()
    return [] if client is None else sorted(client.scheduler_info(n_workers=-1)["workers"])


def holders(parts: Sequence[Any]) -> list[tuple[str, Any]] | None:
    """``(address, future)`` of every persisted partition: a worker holding it and its future.

    Waits for the partitions to be computed (a partition's holder is known only then; a lost worker's
    partitions are computed again first). None without a ``distributed`` client, or when a partition
    is not persisted on it or has no holder (its worker was lost while it was looked up).
    """
    client = _client()
    if client is None:
        return None
    futures = [_future_of(p) for p in parts]
    if any(f is None for f in futures):
        return None
    from gpucal.rows._faults import PassWatch

    PassWatch(client, "reading the rows").wait(futures)
    held_by = client.who_has(futures)
    out = []
    for future in futures:
        addresses = sorted(held_by.get(future.key, ()))
        if not addresses:
            return None
        out.append((addresses[0], future))
    return out


def worker_groups(parts: Sequence[Any]) -> list[tuple[str | None, list[int]]]:
    """Assign persisted partitions to the cluster's workers: ``(address, partition indices)`` per worker.

    Every worker gets ``len(parts) // n_workers`` partitions, or one more, whatever dask placed where:
    a worker keeps the partitions it holds up to its share, and the rest move once to the workers
    short of theirs (:func:`balanced_shares`). The stores built from the groups then split every later
    pass evenly, even when the reads ran on one worker. Indices are ascending in each group and groups
    are ordered by their first partition, so a result built group by group keeps partition order within
    a worker. Without a ``distributed`` client, or for partitions not persisted on it, every partition
    is in one group with no address.
    """
    placed = holders(parts)
    workers = worker_addresses()
    if placed is None or not workers:
        return [(None, list(range(len(parts))))]
    shares = balanced_shares([address for address, _ in placed], workers)
    return sorted(((w, idx) for w, idx in shares.items() if idx), key=lambda item: item[1][0])


def balanced_shares(held_by: Sequence[str], workers: Sequence[str]) -> dict[str, list[int]]:
    """Partition ``i`` (held by ``held_by[i]``) to a worker, ``len(held_by) // len(workers)`` or one more
    each. Each worker keeps what it holds up to the smaller share; only the partitions beyond it move:
    first to the workers short of the smaller share (in index order), then the remainder one each to
    its holder if that holder has no extra one yet, else to the first worker without one."""
    small = len(held_by) // len(workers)
    groups: dict[str, list[int]] = {w: [] for w in workers}
    spare = []
    for i, address in enumerate(held_by):
        if address in groups and len(groups[address]) < small:
            groups[address].append(i)
        else:
            spare.append(i)
    short = [w for w in workers for _ in range(small - len(groups[w]))]
    for w, i in zip(short, spare, strict=False):
        groups[w].append(i)
    for i in spare[len(short) :]:  # fewer than len(workers) left: every worker is at the smaller share
        holder = held_by[i]
        has_room = holder in groups and len(groups[holder]) == small
        target = holder if has_room else next(w for w in workers if len(groups[w]) == small)
        groups[target].append(i)
    return {w: sorted(idx) for w, idx in groups.items()}


def _on_group(fn: Callable[..., Any], indices: list[int], args: tuple[Any, ...], *parts: Any) -> Any:
    return fn(list(parts), indices, *args)


def per_worker(fn: Callable[..., Any], parts: Sequence[Any], *args: Any) -> list[Any]:
    """Return ``fn(parts_of_worker, indices, *args)`` once per worker, computed and kept on that worker.

    ``parts`` are persisted delayed partitions; each worker's call receives its group of
    :func:`worker_groups` (in partition order) and their indices, and runs on that worker: a partition
    moves only when its holder has more than its share. The worker is a preference, not a requirement:
    when it is lost, ``distributed`` computes the call again from its partitions (themselves computed
    again where lost) on another worker, so no pass waits for an address that is gone. The results
    (persisted delayed objects, one per worker, ordered by their first partition) are the partitions of
    the passes that follow: every pass then ships one result per worker.
    """
    import dask

    groups = worker_groups(parts)
    client = _client()
    out = []
    for address, indices in groups:
        group = [parts[i] for i in indices]
        if address is None or client is None:
            out.extend(persist([dask.delayed(_on_group, pure=False)(fn, indices, args, *group)]))
            continue
        future = client.submit(
            _on_group,
            fn,
            indices,
            args,
            *[_future_of(p) for p in group],
            workers=[address],
            allow_other_workers=True,
            pure=False,
        )
        out.append(dask.delayed(future))
    return out


__all__ = [
    "balanced_shares",
    "holders",
    "map_persisted",
    "per_worker",
    "persist",
    "worker_addresses",
    "worker_groups",
]
