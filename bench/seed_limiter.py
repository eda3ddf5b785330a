#!/usr/bin/python3
"""The reference point ratekeeper is measured against: the naive Redis token bucket limiter
(a Lua script with HMGET/HMSET/EXPIRE, called once per decision from Python with redis-py),
kept here as it is commonly written, plus a small driver that loops decisions over many keys
on one connection and prints decisions/s as one JSON line.

    /usr/bin/python3 bench/seed_limiter.py --port P [--requests N] [--keys K]
                                           [--capacity C] [--rate R] [--seed S]
    /usr/bin/python3 bench/seed_limiter.py --print-script

Needs redis-py (Debian: python3-redis). Used by bench/redis_cpu.sh, which also sends the
same script (--print-script) through redis-benchmark.
"""
import argparse
import json
import random
import sys
import time

from redis import Redis

TOKEN_BUCKET_LUA = """
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local refill_rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local requested = tonumber(ARGV[4])

local bucket = redis.call('HMGET', key, 'tokens', 'last_refill')
local tokens = tonumber(bucket[1]) or capacity
local last_refill = tonumber(bucket[2]) or now

-- Refill tokens based on elapsed time
local elapsed = math.max(0, now - last_refill)
local refilled = elapsed * refill_rate
tokens = math.min(capacity, tokens + refilled)

if tokens < requested then
    -- Not enough tokens — reject
    redis.call('HMSET', key, 'tokens', tokens, 'last_refill', now)
    redis.call('EXPIRE', key, 3600)
    return 0
end

-- Consume tokens
tokens = tokens - requested
redis.call('HMSET', key, 'tokens', tokens, 'last_refill', now)
redis.call('EXPIRE', key, 3600)
return 1
"""


class TokenBucketRateLimiter:
    def __init__(
        self,
        redis_client: Redis,
        capacity: int = 100,
        refill_rate: float = 10.0,
    ):
        self.redis = redis_client
        self.capacity = capacity
        self.refill_rate = refill_rate
        self._script = self.redis.register_script(TOKEN_BUCKET_LUA)

    def allow_request(
        self,
        identifier: str,
        requested: int = 1,
    ) -> bool:
        """Check if a request is allowed under the rate limit.

        Args:
            identifier: Unique key (e.g., IP address, user ID, API key).
            requested: Number of tokens to consume.

        Returns:
            True if allowed, False if rate limited.
        """
        key = f"ratelimit:{identifier}"
        now = time.time()
        result = self._script(
            keys=[key],
            args=[self.capacity, self.refill_rate, now, requested],
        )
        return bool(result)


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--print-script", action="store_true",
                        help="print the Lua script and exit")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=positive_int)
    parser.add_argument("--requests", type=positive_int, default=200000)
    parser.add_argument("--keys", type=positive_int, default=10000)
    parser.add_argument("--capacity", type=positive_int, default=100)
    parser.add_argument("--rate", type=positive_float, default=100.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.print_script:
        sys.stdout.write(TOKEN_BUCKET_LUA)
        return
    if args.port is None:
        parser.error("--port is required")

    limiter = TokenBucketRateLimiter(Redis(host=args.host, port=args.port),
                                     capacity=args.capacity, refill_rate=args.rate)
    rng = random.Random(args.seed)
    identifiers = [f"user:{i}" for i in range(args.keys)]
    picks = [rng.randrange(args.keys) for _ in range(args.requests)]
    allowed = 0
    start = time.perf_counter()
    for k in picks:
        if limiter.allow_request(identifiers[k]):
            allowed += 1
    seconds = time.perf_counter() - start
    print(json.dumps({
        "decisions": args.requests,
        "allowed": allowed,
        "denied": args.requests - allowed,
        "seconds": seconds,
        "decisions_per_s": args.requests / seconds,
    }))


if __name__ == "__main__":
    main()
