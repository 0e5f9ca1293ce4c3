#!/usr/bin/env python3
"""How much of a Mooncake trace's reuse depends on which conversations share a worker.

An offline model, without time: the trace's rows in order, each worker an LRU cache of 512-token blocks
(a request's own blocks touched head last, so its tail is evicted first, as the engines and `duet sim`
do), a request's hit the cached blocks at the head of its prompt. It compares one pooled cache of the
fleet's memory with fleets that keep each conversation (its first two blocks: block 0 is shared by every
row, block 1 is a conversation's own) on one worker, placed by least load or by a hash, and the hash
under many seeds: each seed is another draw of which conversations share a worker.

usage: scripts/mooncake-partitions.py TRACE [seconds=300] [blocks_per_worker=1232] [workers=4] [seeds=20]
(1232 blocks of 512 tokens are the 19,718 32-token blocks of the routing-quality issue's ctx sims.)
"""
import hashlib
import json
import statistics
import sys
from collections import OrderedDict

BLOCK = 512


class LRU:
    def __init__(self, capacity):
        self.capacity, self.blocks = capacity, OrderedDict()

    def cached_head(self, hashes):
        n = 0
        for h in hashes:
            if h not in self.blocks:
                break
            n += 1
        return n

    def touch(self, hashes):
        for h in reversed(hashes):  # the head is touched last: evicted last
            self.blocks[h] = True
            self.blocks.move_to_end(h)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)


def tokens(row, blocks):
    n = len(row["hash_ids"])
    return sum(BLOCK if i < n - 1 else row["input_length"] - BLOCK * (n - 1) for i in range(min(blocks, n)))


def replay(rows, workers, capacity, place):
    """Hit ratio and prefill imbalance (max/mean of tokens computed) when place(row, computed) picks."""
    caches = [LRU(capacity) for _ in range(workers)]
    computed = [0] * workers
    hit = total = 0
    for row in rows:
        w = place(row, computed)
        cached = tokens(row, caches[w].cached_head(row["hash_ids"]))
        hit, total = hit + cached, total + row["input_length"]
        computed[w] += row["input_length"] - cached
        caches[w].touch(row["hash_ids"])
    return hit / total, max(computed) / (sum(computed) / workers)


def by_conversation(choose):
    pins = {}

    def place(row, computed):
        key = tuple(row["hash_ids"][:2])
        if key not in pins:
            pins[key] = choose(key, computed)
        return pins[key]

    return place


def main():
    trace = sys.argv[1]
    given = sys.argv[2:]
    seconds, capacity, workers, seeds = (int(given[i]) if i < len(given) else d for i, d in enumerate((300, 1232, 4, 20)))
    rows = [r for r in map(json.loads, open(trace)) if r["timestamp"] < seconds * 1000]
    pooled, _ = replay(rows, 1, capacity * workers, lambda row, computed: 0)
    least, least_imb = replay(rows, workers, capacity,
                              by_conversation(lambda key, computed: min(range(workers), key=lambda w: (computed[w], w))))

    def hashed(seed):
        digest = lambda key: int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest(), 16)
        return replay(rows, workers, capacity, by_conversation(lambda key, computed: digest(key) % workers))

    draws = sorted(hashed(s) for s in range(seeds))
    hits = [h for h, _ in draws]
    print(f"{len(rows)} requests, {workers} workers of {capacity} blocks")
    print(f"one pooled cache:                      hit ratio {pooled:.4f}")
    print(f"conversations placed by least load:    hit ratio {least:.4f}, imbalance {least_imb:.3f}")
    print(f"conversations placed by hash, {seeds} seeds: hit ratio min {hits[0]:.4f}, median "
          f"{statistics.median(hits):.4f}, max {hits[-1]:.4f}; imbalance median "
          f"{statistics.median(i for _, i in draws):.3f}")


if __name__ == "__main__":
    main()
