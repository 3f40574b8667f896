"""Which rank owns each page of a sequence's KV cache (context parallelism), and where it sits locally.

A page-table row is a sequence's cache as logical pages: logical page j holds the global slots
[j * page_size, (j + 1) * page_size). A ShardLayout gives the owner rank of every logical page of every
row. Each rank stores only the pages it owns, in its own page pool, and its own page table lists them in
increasing logical order (local page n of a row = the row's n-th owned logical page). That order is the
invariant everything rests on: the owned slots of any range of global slots are a contiguous range of
local slots, so a rank attends over its part of a sequence with plain local lengths, and consecutive new
tokens it owns are appended to consecutive local slots.

numpy only; the layout is host metadata, the same on every rank.
"""
import numpy as np

from .errors import KvattnError


class ShardLayout:
    """owner (rows, pages_per_row) ints in [0, world_size): the rank that stores logical page j of row r."""

    def __init__(self, owner, world_size):
        owner = np.asarray(owner)
        if owner.ndim != 2 or not np.issubdtype(owner.dtype, np.integer):
            raise KvattnError(f"owner: expected a 2-D integer array (rows, pages_per_row), got shape "
                              f"{owner.shape} dtype {owner.dtype}")
        if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
            raise KvattnError(f"world_size: expected an int >= 1, got {world_size!r}")
        bad = (owner < 0) | (owner >= world_size)
        if bad.any():
            r, j = np.argwhere(bad)[0]
            raise KvattnError(f"owner[{r}, {j}]: expected a rank in [0, {world_size}), got {owner[r, j]}")
        self.owner = owner.astype(np.int64)
        self.world_size = int(world_size)
        self.rows, self.pages_per_row = owner.shape
        self._owned_before = {}  # rank -> (rows, pages_per_row + 1): owned pages among logical [0, j)

    @classmethod
    def contiguous(cls, rows, pages_per_row, world_size):
        """Rank r owns the r-th run of ceil(pages_per_row / world_size) logical pages (ring-attention style)."""
        per_rank = -(-pages_per_row // world_size)
        owner = np.broadcast_to(np.arange(pages_per_row) // max(per_rank, 1), (rows, pages_per_row))
        return cls(owner, world_size)

    @classmethod
    def round_robin(cls, rows, pages_per_row, world_size):
        """Logical page j lives on rank j % world_size: every rank holds an equal share of every length."""
        owner = np.broadcast_to(np.arange(pages_per_row) % world_size, (rows, pages_per_row))
        return cls(owner, world_size)

    def _check_rank(self, rank):
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < self.world_size:
            raise KvattnError(f"rank: expected an int in [0, {self.world_size}), got {rank!r}")

    def owned_before(self, rank):
        """(rows, pages_per_row + 1) int64: how many of logical pages [0, j) of each row `rank` owns."""
        self._check_rank(rank)
        if rank not in self._owned_before:
            mine = (self.owner == rank).astype(np.int64)
            self._owned_before[rank] = np.concatenate([np.zeros((self.rows, 1), np.int64),
                                                       np.cumsum(mine, axis=1)], axis=1)
        return self._owned_before[rank]

    def local_pages(self, rank):
        """(rows, width) int64: the logical page of each of `rank`'s local pages, -1 past the row's last.

        width = local_width(rank). A rank's page table has these rows and at least this many columns."""
        counts = self.owned_before(rank)[:, -1]
        table = np.full((self.rows, self.local_width(rank)), -1, np.int64)
        for r in range(self.rows):
            table[r, : counts[r]] = np.flatnonzero(self.owner[r] == rank)
        return table

    def local_width(self, rank):
        """The most pages `rank` owns in any row (the column count its page table needs)."""
        return int(self.owned_before(rank)[:, -1].max(initial=0))

    def local_slots(self, rank, rows, slots, page_size):
        """How many of global slots [0, slots) of page-table row `rows` are `rank`'s: elementwise, int64.

        For an owned slot s this is its local slot; for any s it is the local end of the global range
        [0, s). slots may be 0 .. pages_per_row * page_size."""
        rows, slots = np.broadcast_arrays(np.asarray(rows, np.int64), np.asarray(slots, np.int64))
        page, offset = slots // page_size, slots % page_size
        before = self.owned_before(rank)[rows, page]
        inside = page < self.pages_per_row
        owns = np.zeros(slots.shape, bool)
        owns[inside] = self.owner[rows[inside], page[inside]] == rank
        return before * page_size + np.where(owns, offset, 0)
