"""The anchoring order of tracing/walk.py: sequence numbers give a producers-first order when they are one,
and anchoring by it picks exactly the nodes Kahn's order picks."""

from __future__ import annotations

import random

from gradviz_nb.tracing import walk


def _random_dag(n: int, seed: int, width: int) -> tuple[list[list[int]], list[int]]:
    """Nodes created in order 0..n-1 (each one's inputs made before it); indices shuffled like a walk's."""
    rng = random.Random(seed)
    made = list(range(n))
    producers_by_made = [[rng.randrange(max(0, i - width), i) for _ in range(rng.randint(1, 2))] if i else []
                         for i in made]
    walk_index = made[:]
    rng.shuffle(walk_index)  # walk order is not creation order
    producers: list[list[int]] = [[] for _ in range(n)]
    seqs = [0] * n
    for i in made:
        producers[walk_index[i]] = [walk_index[p] for p in producers_by_made[i]]
        seqs[walk_index[i]] = i
    return producers, seqs


def _anchored(producers: list[list[int]], seqs: list[int] | None) -> list[int]:
    fns = [object() for _ in producers]
    index = {id(f): k for k, f in enumerate(fns)}
    count = walk.anchor(fns, producers, seqs)
    picked = sorted(index[id(f)] for f in walk._anchors[len(walk._anchors) - count:])
    del walk._anchors[len(walk._anchors) - count:]
    return picked


def test_sequence_order_is_producers_first_and_anchors_the_same_nodes_as_kahn() -> None:
    for seed in range(3):
        producers, seqs = _random_dag(3000, seed, width=3)
        order = walk._seq_order(producers, seqs)
        assert order is not None
        position = {k: i for i, k in enumerate(order)}
        assert all(position[p] < position[k] for k, ps in enumerate(producers) for p in ps)
        by_seq, by_kahn = _anchored(producers, seqs), _anchored(producers, None)
        assert by_seq == by_kahn and len(by_seq) >= 3000 // (3 * walk.ANCHOR_EVERY)


def test_numbers_that_are_no_producers_first_order_fall_back_to_kahn() -> None:
    producers, seqs = _random_dag(1500, 7, width=2)
    backwards = [-s for s in seqs]  # e.g. nodes numbered by another thread's counter
    assert walk._seq_order(producers, backwards) is None
    assert _anchored(producers, backwards) == _anchored(producers, None)
