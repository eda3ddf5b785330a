#!/usr/bin/python3
"""Decisions/s from one Python process through ratekeeper's module, on the workload of
bench/seed_limiter.py (the seed's class): `requests` decisions over `keys` identities picked
at random, a token bucket of `capacity` refilled at `rate` per second, on one redis-server.
Prints one JSON line.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_module.py --port P --mode sync|threads|async|batch|batch-async
        [--requests N] [--keys K] [--capacity C] [--rate R] [--in-flight F] [--threads T] [--batch B]

Modes (--batch B, --in-flight F, --threads T): `sync` checks one at a time on one thread, as
the seed's class does; `threads` runs T threads of synchronous checks (the GIL is released
while the store answers); `async` keeps F checks in flight on one asyncio loop (check_async);
`batch` decides B identities per call (check_many: independent decisions sent to the store
together); `batch-async` keeps F such calls in flight on one asyncio loop (check_many_async),
so that one call's decisions are prepared and read while Redis answers another's.
"""
import argparse
import asyncio
import json
import random
import threading
import time

import ratekeeper


def config(port: int, capacity: int, rate: float) -> str:
    return f"""
store: {{url: "redis://127.0.0.1:{port}", command_timeout: 2s}}
logging: {{decisions: {{enabled: false}}}}
rules:
  - name: seed
    match: false
    identity: {{type: header, header: X-User-ID}}
    limits: [{{algorithm: token_bucket, capacity: {capacity}, refill_rate: {rate}}}]
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["sync", "threads", "async", "batch", "batch-async"], default="async")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=200000)
    parser.add_argument("--keys", type=int, default=10000)
    parser.add_argument("--capacity", type=int, default=100)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    limiter = ratekeeper.Limiter(yaml=config(args.port, args.capacity, args.rate), threads=1)
    rng = random.Random(args.seed)
    identities = [f"user:{i}" for i in range(args.keys)]
    picks = [identities[rng.randrange(args.keys)] for _ in range(args.requests)]
    limiter.check("seed", picks[0], 0)  # connected, scripts loaded
    allowed = 0
    start = time.perf_counter()
    if args.mode == "sync":
        for identity in picks:
            allowed += limiter.check("seed", identity).allowed
    elif args.mode == "threads":
        counts = [0] * args.threads

        def work(t):
            n = 0
            for identity in picks[t::args.threads]:
                n += limiter.check("seed", identity).allowed
            counts[t] = n

        workers = [threading.Thread(target=work, args=(t,)) for t in range(args.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        allowed = sum(counts)
    elif args.mode == "batch":
        for i in range(0, len(picks), args.batch):
            allowed += sum(d.allowed for d in limiter.check_many("seed", picks[i:i + args.batch]))
    elif args.mode == "batch-async":
        async def run_batches():
            n = 0
            it = iter(range(0, len(picks), args.batch))

            async def lane():
                nonlocal n
                for i in it:
                    decisions = await limiter.check_many_async("seed", picks[i:i + args.batch])
                    n += sum(d.allowed for d in decisions)

            await asyncio.gather(*[lane() for _ in range(args.in_flight)])
            return n

        allowed = asyncio.run(run_batches())
    else:
        async def run():
            n = 0
            it = iter(picks)

            async def lane():
                nonlocal n
                for identity in it:
                    decision = await limiter.check_async("seed", identity)
                    n += decision.allowed

            await asyncio.gather(*[lane() for _ in range(args.in_flight)])
            return n

        allowed = asyncio.run(run())
    seconds = time.perf_counter() - start
    limiter.close()
    print(json.dumps({"mode": args.mode, "decisions": args.requests, "allowed": allowed,
                      "denied": args.requests - allowed, "seconds": seconds,
                      "decisions_per_s": args.requests / seconds}))


if __name__ == "__main__":
    main()
