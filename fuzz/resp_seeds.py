#!/usr/bin/env python3
"""Writes the seed corpus of resp_fuzz (fuzz/corpus/resp/): the replies the Redis scripts and
the cluster send, each behind the 128-byte header resp_fuzz.cpp reads with FuzzedDataProvider
(chunk sizes, then the shapes of the checks the replies answer)."""

import os

HEADER = 128
MAX_HORIZON = 1 << 51


def header(values):
    """values: (value, min, max) in the order resp_fuzz consumes them. FuzzedDataProvider
    reads an integer in [min, max] from the end of its data, most significant byte first, as
    many bytes as max - min needs."""
    tail = bytearray()
    for value, lo, hi in values:
        span, v = hi - lo, value - lo
        assert 0 <= v <= span
        n = (span.bit_length() + 7) // 8
        tail += v.to_bytes(n, "big") if n else b""
    tail.reverse()
    assert len(tail) <= HEADER
    return bytes(HEADER - len(tail)) + bytes(tail)


def shape(checks, entries, max_chunk=7, seed=12345):
    """checks: lists of (algorithm, capacity, period, cost); entries: (check index, repeats)."""
    v = [(max_chunk, 1, 64), (seed, 0, 2**32 - 1), (len(checks), 1, 3), (len(entries), 1, 4)]
    for index, repeats in entries:
        v += [(index, 0, len(checks) - 1), (repeats, 1, 64)]
    for check in checks:
        v.append((len(check), 1, 3))
        for algorithm, capacity, period, cost in check:
            v += [(algorithm, 0, 3), (capacity, 1, MAX_HORIZON), (period, 1, MAX_HORIZON // capacity),
                  (cost, 0, capacity)]
    return header(v)


def integers(*values):
    return b"*%d\r\n" % len(values) + b"".join(b":%d\r\n" % v for v in values)


def array(*parts):
    return b"*%d\r\n" % len(parts) + b"".join(parts)


TB = (0, 10, 100_000, 1)  # token bucket: 10 tokens, one per 100 ms, cost 1
WIN = (3, 100, 60_000_000, 2)  # fixed window: 100 per minute, cost 2
ONE = shape([[TB]], [(0, 1)])
TWO = shape([[TB, WIN]], [(0, 1)])
BATCH = shape([[TB], [TB, WIN]], [(0, 5), (1, 2)], max_chunk=3, seed=99)

SEEDS = {
    "single-allowed": ONE + integers(1, 10, 9, 0, 100_000),
    "single-denied": ONE + integers(0, 10, 0, 100_000, 1_000_000),
    "multi-two-items": TWO + integers(1, 10, 9, 0, 100_000, 1, 10, 9, 0, 100_000, 1, 100, 98, 0, 60_000_000),
    "multi-at": TWO + integers(1, 10, 9, 0, 100_000, 1, 10, 9, 0, 100_000, 1, 100, 98, 0, 60_000_000,
                               1_700_000_000_000_000),
    "refund": ONE + integers(1, 1, 10, 10, 0, 0),
    "batch-compact-and-multi": BATCH + array(
        integers(3, 1, 10, 9, 0, 100_000, 0, 10, 0, 100_000, 1_000_000),
        array(integers(1, 10, 8, 0, 200_000, 1, 10, 8, 0, 200_000, 1, 100, 96, 0, 60_000_000))),
    "batch-error": BATCH + b"-ERR Error running script (call to f_1234): @user_script:1: bad\r\n",
    "noscript": ONE + b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
    "moved": ONE + b"-MOVED 3999 127.0.0.1:6381\r\n-ASK 3999 :6381\r\n",
    "extremes": TWO + integers(2**63 - 1, -(2**63), 2**63 - 1, -(2**63), 2**63 - 1),
    "scalars": ONE + b"+OK\r\n$5\r\nhello\r\n$0\r\n\r\n$-1\r\n*-1\r\n*0\r\n:-1\r\n",
    "nested": ONE + b"*2\r\n*2\r\n*1\r\n:1\r\n$-1\r\n*3\r\n+a\r\n-b\r\n:3\r\n",
    # A first admitted decision no script sends: remaining − k·cost overflowed (fixed).
    "crash-compact-overflow": shape([[TB]], [(0, 5)]) + array(
        integers(3, 1, 10, -(2**63), 0, 100_000, 0, 10, 0, 100_000, 1_000_000)),
    "cluster-slots": ONE + array(array(b":0\r\n", b":16383\r\n",
                                       array(b"$9\r\n127.0.0.1\r\n", b":7000\r\n", b"$3\r\nabc\r\n"))),
}

if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "resp")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
