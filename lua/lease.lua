-- Entry of the lease script (store/leasing_store.hpp), line by line as
-- algorithms::lease_grant: consumes a block of units of one key at once. KEYS[1] = key;
-- ARGV = {algorithm (0 token bucket, 3 fixed window), capacity, period_us, min, want, now_us}
-- (now_us -1: the server's clock). Grants g = min(want, the units available now) when
-- g >= min, as one step of cost g; otherwise nothing, with the decision of a step of cost
-- `min` (its exact retry_after). Reply: {g, allowed, limit, remaining, retry_after_us,
-- reset_after_us, at_us}, `at_us` the instant decided at. The unused units of a lease go back
-- through the refund script (lua/refund.lua) with cost = the units, `at` and reset_after
-- of this reply.
local LEASE_STEPS = {[0] = token_bucket, [3] = fixed_window}

local function run_lease()
  if #KEYS ~= 1 or #ARGV ~= 6 then
    fail('expected 1 key and 6 arguments: algorithm, capacity, period_us, min, want, now_us')
  end
  local algorithm = tonumber(ARGV[1])
  local step = LEASE_STEPS[algorithm]
  if step == nil then fail('only token bucket (0) and fixed window (3) limits can be leased, got ' .. tostring(ARGV[1])) end
  local capacity, period, min = limit_args(algorithm, ARGV[2], ARGV[3], ARGV[4])
  local want = integer_arg(ARGV[5], 'want')
  if min < 1 then fail('min must be >= 1, got ' .. str(min)) end
  if want < min or want > capacity then
    fail('want must be between min and capacity, got ' .. str(want))
  end
  local now = resolve_now(ARGV[6])
  local peek = step(KEYS[1], capacity, period, 0, now)
  local granted = math.min(want, peek[3])
  local decision, store
  if granted < min then
    granted = 0
    decision, store = step(KEYS[1], capacity, period, min, now)
  else
    decision, store = step(KEYS[1], capacity, period, granted, now)
  end
  if store then store() end
  return {granted, decision[1], decision[2], decision[3], decision[4], decision[5], now}
end
