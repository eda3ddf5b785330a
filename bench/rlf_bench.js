// rate-limiter-flexible's RateLimiterRedis on ioredis (auto-pipelining on): `concurrency`
// decisions in flight over one connection, keys drawn uniformly from `keys`, until
// `requests` decisions are made; prints one JSON line (decisions/s, allowed, denied, errors).
// The packages come from NODE_PATH (bench/redis_cpu.sh installs them outside the tree).
//
//   node bench/rlf_bench.js PORT REQUESTS KEYS CONCURRENCY POINTS DURATION_S
'use strict';
const Redis = require('ioredis');
const { RateLimiterRedis, RateLimiterRes } = require('rate-limiter-flexible');

async function main() {
  const args = process.argv.slice(2).map(Number);
  if (args.length !== 6 || !args.every((v) => Number.isInteger(v) && v > 0)) {
    throw new Error('usage: rlf_bench.js PORT REQUESTS KEYS CONCURRENCY POINTS DURATION_S (positive integers)');
  }
  const [port, requests, keys, concurrency, points, duration] = args;
  const client = new Redis({ host: '127.0.0.1', port, enableAutoPipelining: true, lazyConnect: true });
  await client.connect();
  const limiter = new RateLimiterRedis({ storeClient: client, points, duration, keyPrefix: 'rlflx' });

  let issued = 0;
  let allowed = 0;
  let denied = 0;
  let errors = 0;
  let firstError = null;
  async function worker() {
    while (issued < requests) {
      issued++;
      const key = 'user:' + Math.floor(Math.random() * keys);
      try {
        await limiter.consume(key);
        allowed++;
      } catch (e) {
        if (e instanceof RateLimiterRes) {
          denied++;
        } else {
          errors++;
          if (firstError === null) firstError = String(e);
        }
      }
    }
  }
  const start = process.hrtime.bigint();
  await Promise.all(Array.from({ length: Math.min(concurrency, requests) }, worker));
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  client.disconnect();
  console.log(JSON.stringify({
    decisions: requests, allowed, denied, errors, first_error: firstError, seconds,
    decisions_per_s: requests / seconds,
  }));
}

main().catch((e) => {
  console.error(`rlf_bench.js: ${e.message}`);
  process.exit(1);
});
