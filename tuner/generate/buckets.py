"""Buckets of token counts and cache lengths: which compiled shape serves a call.

A program is compiled at a few lengths; a call of ``n`` tokens runs the smallest
compiled length ``>= n`` with the rows past ``n`` padded and masked. Prefill takes a
prompt of ``n`` tokens at token-count bucket ``N`` (attention over ``N`` cache rows);
decode takes one token over the cache prefix rounded up to a bucket. The buckets are
powers of two from ``smallest`` up to and including ``max_len``, so a call costs at most
about twice its exact-length program (less where a kernel's time is not linear in the
length); finer buckets trade compile time for less padding.
"""

from __future__ import annotations

import bisect

__all__ = ["bucket_for", "default_buckets", "program_shapes"]


def default_buckets(max_len: int, smallest: int = 16) -> tuple[int, ...]:
    """Powers of two from ``smallest`` below ``max_len``, then ``max_len`` itself.

    Raises
    ------
    ValueError
        ``max_len`` or ``smallest`` below 1.
    """
    if max_len < 1 or smallest < 1:
        raise ValueError(f"max_len and smallest must be positive, got {max_len} and {smallest}")
    out, size = [], smallest
    while size < max_len:
        out.append(size)
        size *= 2
    return (*out, max_len)


def bucket_for(length: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket ``>= length``.

    Raises
    ------
    ValueError
        ``length`` below 1 or above the largest bucket.
    """
    i = bisect.bisect_left(buckets, length)
    if length < 1 or i == len(buckets):
        raise ValueError(f"length {length} outside 1..{buckets[-1]}")
    return buckets[i]


def program_shapes(buckets: tuple[int, ...]) -> list[tuple[str, int, int]]:
    """Every (program, tokens, cache rows) a runtime with these buckets calls.

    ``attn_in`` at one token (decode) and at each bucket (prefill); ``attn_out`` at
    ``(N, N)`` for each prefill bucket and ``(1, L)`` for each cache bucket; ``head``
    once, on one token.
    """
    shapes = [("attn_in", 1, 0)] + [("attn_in", n, 0) for n in buckets if n > 1]
    shapes += [("attn_out", n, n) for n in buckets] + [("attn_out", 1, n) for n in buckets if n > 1]
    return shapes + [("head", 1, 0)]
