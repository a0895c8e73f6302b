"""Paged KV-cache block manager with a block-hashed prefix cache (§5.5, §5.7, §5.8).

Blocks hold ``block_size`` tokens. A block whose tokens are all computed gets a hash that chains
the hash of the previous block with its own token ids, so equal hashes mean equal prefixes. When
its last user releases it, a hashed block is kept as *evictable* (LRU order) and can be reused by a
later request with the same prefix; unhashed blocks go straight back to the free list. Allocation
takes a free block first, else evicts the least recently released cached block.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["BlockManager", "chain_hash"]


def chain_hash(parent: int, tokens: Sequence[int]) -> int:
    """Hash of a full block given its parent block's hash (0 for the first block)."""
    return hash((parent, tuple(tokens)))


class BlockManager:
    """Reference-counted KV blocks; the prefix cache maps block hashes to cached blocks."""

    def __init__(self, num_blocks: int, block_size: int, prefix_cache: bool = True) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enabled = prefix_cache
        self.ref = [0] * num_blocks
        self.hash: list[int | None] = [None] * num_blocks
        self.free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() yields low ids first
        self.evictable: OrderedDict[int, None] = OrderedDict()  # ref 0, hashed; LRU first
        self.cached: dict[int, int] = {}  # hash -> block
        self.evictions = 0

    # ------------------------------------------------------------------ counts
    @property
    def num_free(self) -> int:
        """Blocks an allocation can take (free + evictable cached)."""
        return len(self.free) + len(self.evictable)

    @property
    def num_used(self) -> int:
        """Blocks referenced by at least one running sequence."""
        return self.num_blocks - len(self.free) - len(self.evictable)

    # ------------------------------------------------------------------ prefix cache
    def match(self, hashes: Sequence[int], max_blocks: int) -> list[int]:
        """Cached blocks for the longest prefix of ``hashes`` (at most ``max_blocks``)."""
        out: list[int] = []
        if not self.enabled:
            return out
        cached = self.cached
        for h in hashes[:max_blocks]:
            b = cached.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def can_allocate(self, n_new: int, matched: Sequence[int] = ()) -> bool:
        """Whether ``n_new`` fresh blocks fit after taking the ``matched`` cached ones."""
        n_ev = sum(1 for b in matched if self.ref[b] == 0)
        return self.num_free - n_ev >= n_new

    def acquire(self, matched: Sequence[int]) -> None:
        """Take a reference on cached blocks (removing them from the evictable pool)."""
        for b in matched:
            if self.ref[b] == 0:
                del self.evictable[b]
            self.ref[b] += 1

    def allocate(self) -> int:
        """One fresh block (ref 1). Raises ``MemoryError`` when none is left."""
        if self.free:
            b = self.free.pop()
        elif self.evictable:
            b, _ = self.evictable.popitem(last=False)
            h = self.hash[b]
            if h is not None and self.cached.get(h) == b:
                del self.cached[h]
            self.hash[b] = None
            self.evictions += 1
        else:
            raise MemoryError("KV cache has no free block")
        self.ref[b] = 1
        return b

    def register(self, block: int, h: int) -> None:
        """Publish a full, computed block under its chain hash (first writer wins)."""
        if self.enabled and self.hash[block] is None and h not in self.cached:
            self.cached[h] = block
            self.hash[block] = h

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference from each block; tail blocks become the first eviction candidates."""
        for b in reversed(blocks):
            r = self.ref[b] - 1
            self.ref[b] = r
            if r == 0:
                if self.hash[b] is not None:
                    self.evictable[b] = None
                else:
                    self.free.append(b)
            elif r < 0:  # pragma: no cover - accounting bug guard
                raise AssertionError(f"block {b} released more often than referenced")

    def flush(self) -> None:
        """Forget every cached prefix (evictable blocks become free; in-use blocks lose their hash)."""
        for b in self.evictable:
            self.hash[b] = None
            self.free.append(b)
        self.evictable.clear()
        for b in self.cached.values():
            self.hash[b] = None
        self.cached.clear()

    def set_enabled(self, on: bool) -> None:
        if not on:
            self.flush()
        self.enabled = on

    def check_invariants(self) -> None:
        """Assert the accounting is consistent (used by tests)."""
        free = set(self.free)
        ev = set(self.evictable)
        assert len(free) == len(self.free), "duplicate block in free list"
        assert not (free & ev), "block both free and evictable"
        for b in range(self.num_blocks):
            if b in free:
                assert self.ref[b] == 0 and self.hash[b] is None, f"free block {b} in use or hashed"
            elif b in ev:
                assert self.ref[b] == 0 and self.hash[b] is not None, f"evictable block {b} bad"
            else:
                assert self.ref[b] > 0, f"block {b} leaked (ref 0 but not free)"
        for h, b in self.cached.items():
            assert self.hash[b] == h, f"cache map disagrees for block {b}"
