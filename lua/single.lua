-- Entry of the single-key scripts. KEYS[1] = key; ARGV = {capacity, period_us, cost, now_us}
-- (now_us -1: the server's clock). Returns {allowed, limit, remaining, retry_after_us,
-- reset_after_us}. `algorithm`: the number of `step` (enum algorithms::Algorithm).
local function run_single(step, algorithm)
  if #KEYS ~= 1 or #ARGV ~= 4 then
    fail('expected 1 key and 4 arguments: capacity, period_us, cost, now_us')
  end
  local capacity, period, cost = limit_args(algorithm, ARGV[1], ARGV[2], ARGV[3])
  local now = resolve_now(ARGV[4])
  if algorithm == TOKEN_BUCKET then
    local allowed, remaining, retry_after, reset_after = token_bucket_now(KEYS[1], capacity, period, cost, now)
    return {allowed, capacity, remaining, retry_after, reset_after}
  end
  local decision, store = step(KEYS[1], capacity, period, cost, now)
  if store then store() end
  return decision
end
