"""Per-sample sampling seeds: each sample's randomness is a function of what it is (which problem,
which member of the group, which attempt), never of which batch, engine or rank generates it. So
the same rollouts come out of one process or of N ranks each generating its share, and a step
replayed after a resume or a rollback draws the same samples from the same weights.
"""

from __future__ import annotations

import hashlib


def sample_seed(*parts: int) -> int:
    """A 63-bit seed from integers (e.g. run seed, data index, sample index, attempt)."""
    digest = hashlib.blake2b(b":".join(str(p).encode() for p in parts), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF
