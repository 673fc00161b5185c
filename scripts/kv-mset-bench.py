#!/usr/bin/env python3
"""MSET of N keys against the same N keys as pipelined SETs, on one
connection to a Redis-protocol server, in the same run (make bench-kv).

Each round writes N fresh keys (64 B values) as N pipelined SETs, then
the same keys with one MSET (new values); the figures are the medians of
the rounds' times, in milliseconds. A reply other than OK fails the run.
Requests are encoded before the clock starts; replies are read as the
exact bytes expected. Prints one line per N, and a BENCH line (name
kv.resp.mset.<N>, ref set.pipelined) for the N given with --bench.

usage: kv-mset-bench.py PORT [--sizes 2,100,1000,10000] [--rounds 5]
                             [--repeat-key] [--bench 1000]
--repeat-key: every MSET names each key twice (the first value lost)."""
import argparse
import os
import socket
import statistics
import sys
import time


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read_exact(f, want, what):
    got = f.read(len(want))
    if got != want:
        sys.exit(f"kv-mset-bench: {what}: unexpected reply {got[:200]!r}")


def timed(sock, f, request, want, what):
    start = time.perf_counter()
    sock.sendall(request)
    read_exact(f, want, what)
    return (time.perf_counter() - start) * 1000


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("port", type=int)
    p.add_argument("--sizes", default="2,100,1000,10000")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat-key", action="store_true")
    p.add_argument("--bench", type=int, default=0)
    a = p.parse_args()
    sock = socket.create_connection(("127.0.0.1", a.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = sock.makefile("rb")
    run = os.urandom(4).hex().encode()
    for n in [int(s) for s in a.sizes.split(",")]:
        sets, msets = [], []
        for r in range(a.rounds):
            keys = [b"mset:%s:%d:%d:%d" % (run, n, r, i) for i in range(n)]
            value = b"s" * 64
            pipelined = b"".join(encode([b"SET", k, value]) for k in keys)
            args = [b"MSET"]
            for k in keys:
                if a.repeat_key:
                    args += [k, b"x" * 64]
                args += [k, b"m" * 64]
            sets.append(timed(sock, f, pipelined, b"+OK\r\n" * n, f"SET x{n}"))
            msets.append(timed(sock, f, encode(args), b"+OK\r\n", f"MSET of {n}"))
        s, m = statistics.median(sets), statistics.median(msets)
        kind = "repeated keys" if a.repeat_key else "distinct keys"
        print(f"kv mset {n} {kind}: MSET {m:.3f} ms, pipelined SETs {s:.3f} ms, "
              f"ratio {m / s:.3f} (medians of {a.rounds})")
        if n == a.bench:
            print(f"BENCH name=kv.resp.mset.{n} value={m:.3f} unit=ms "
                  f"ref=set.pipelined:{s:.3f} ratio={m / s:.3f}")


if __name__ == "__main__":
    main()
