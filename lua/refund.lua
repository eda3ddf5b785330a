-- Entry of the refund script: gives back what an earlier admitted check consumed, for a
-- check whose other keys, on other Redis nodes, were denied (RedisClusterStore). KEYS =
-- k1..kN; ARGV = {at_us, now_us, then per key: algorithm, capacity, period_us, cost,
-- reset_after_us}: `at_us` the instant the consumption was decided at (as "multi_at"
-- reports it), `now_us` the instant of the refund (-1: the server's clock), each key's limit,
-- the cost it consumed and the reset_after its admitted decision reported. Reply, per key, 6
-- integers: 1 when state was given back (0: nothing of that consumption counts any more,
-- or cost 0), then the decision of a peek after the refund.
-- A refund never gives back more than `cost`, never goes below an empty state, and leaves
-- each key with the lifetime a step would give the state it leaves.

-- Token bucket. GCRA keeps one number, `tat`, the end of the line of consumptions the
-- bucket still owes, which refill oldest first. The consumption left tat_c = at +
-- reset_after; it ends there in the line, or earlier once consumptions before it were
-- refunded (a refund takes its part out and moves the later ones forward). It still holds
-- at most min(cost·T, tat_c − now) (it has refilled by tat_c at the latest), and never more
-- than the bucket owes, tat − now: that is given back, tat −= held, the key deleted once
-- the bucket is full. So refunds in any order give back every consumption that has not
-- refilled, and refunding them all leaves the bucket full. The line itself is not kept: where
-- an earlier refund moved this consumption forward far enough that part of it refilled,
-- that part is given back as well. Each refund thus leaves the bucket within what refills
-- between `at` and now (and within cost·T) of the bucket rebuilt from the consumptions not
-- refunded. A key lost since (evicted) cannot be told apart: the refund then gives back at
-- most cost·T of what the key holds now.
local function refund_token_bucket(key, _, interval, cost, _, now, tat_c)
  local value = read_string(key)
  local tat = value and string.match(value, '^%d+$') and tonumber(value)
  if cost == 0 or not tat then return false end
  local held = math.min(cost * interval, tat_c - now, tat - now)
  if held <= 0 then return false end
  local refunded = tat - held
  if refunded > now then
    write_string(key, str(refunded), expiry(refunded))
  else
    delete_string(key)
  end
  return true
end

-- Fixed window: the count of the window the consumption was counted in (it ends at
-- at + reset_after), while that window has not ended.
local function refund_fixed_window(key, _, window, cost, _, now, ends)
  local value = read_string(key)
  if cost == 0 or not value then return false end
  local a, b = string.match(value, '^(%d+):(%d+)$')
  if not a then return false end
  local t, current = tonumber(a), tonumber(b)
  if t + window ~= ends or cdiv(now, window) * window > t or current == 0 then
    return false
  end
  current = math.max(0, current - cost)
  if current > 0 then
    write_string(key, str(t) .. ':' .. str(current), 'KEEPTTL')  -- the window's end
  else
    delete_string(key)
  end
  return true
end

-- Sliding window counter: the count of the window the consumption was counted in (its
-- state ends at at + reset_after, two windows after that window's start), the current or,
-- once the window rolled over, the previous one; nothing once that window has left both.
local function refund_sliding_window_counter(key, _, window, cost, _, now, ends)
  local value = read_string(key)
  if cost == 0 or not value then return false end
  local a, b, c = string.match(value, '^(%d+):(%d+):(%d+)$')
  if not a then return false end
  local t, current, previous = tonumber(a), tonumber(b), tonumber(c)
  -- The state at `now`, rolled over as the step rolls it.
  local aligned = cdiv(now, window) * window
  if t < aligned then
    previous = t + window == aligned and current or 0
    current = 0
    t = aligned
  end
  local function expires_at()
    if current > 0 then return t + 2 * window end
    if previous > 0 then return t + window end
    return 0
  end
  local before = expires_at()
  local counted = ends - 2 * window
  if counted == t and current > 0 then
    current = math.max(0, current - cost)
  elseif counted + window == t and previous > 0 then
    previous = math.max(0, previous - cost)
  else
    return false
  end
  local after = expires_at()
  local state = str(t) .. ':' .. str(current) .. ':' .. str(previous)
  if after == 0 then
    delete_string(key)
  elseif after == before then
    write_string(key, state, 'KEEPTTL')
  else
    write_string(key, state, expiry(after))
  end
  return true
end

-- Sliding window log: `cost` entries stamped `at` (entries at one time are
-- interchangeable), the last ones, so that the k-th entry at a time stays k = 0 ..
-- ZCOUNT-1; nothing once `at` has left the window. The key expires when its newest
-- remaining entry leaves the window.
local function refund_sliding_window_log(key, _, window, cost, at, now)
  if cost == 0 or at <= now - window then return false end
  if type(redis.pcall('ZREMRANGEBYSCORE', key, '-inf', str(now - window))) == 'table' then
    return false  -- another algorithm's key: nothing of this one to give back
  end
  local at_text = str(at)
  local count = redis.call('ZCOUNT', key, at_text, at_text)
  if count == 0 then return false end
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  local k = count - math.min(cost, count)
  while k < count do
    local members = {}
    for _ = 1, math.min(ZADD_BATCH, count - k) do
      members[#members + 1] = log_member(at_text, k)
      k = k + 1
    end
    redis.call('ZREM', key, unpack(members))
  end
  if redis.call('EXISTS', key) == 1 then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
    if last ~= newest then expire(key, tonumber(last) + window) end
  end
  return true
end

local ALGORITHMS = {
  [0] = {step = token_bucket, refund = refund_token_bucket},
  [1] = {step = sliding_window_log, refund = refund_sliding_window_log},
  [2] = {step = sliding_window_counter, refund = refund_sliding_window_counter},
  [3] = {step = fixed_window, refund = refund_fixed_window},
}

local function run_refund()
  local n = #KEYS
  if #ARGV ~= 2 + 5 * n then
    fail('expected at_us, now_us, then algorithm, capacity, period_us, cost, reset_after_us per key')
  end
  -- Every argument is checked before anything is read or written.
  local at = integer_arg(ARGV[1], 'at')
  if at < 0 then fail('at must be >= 0, got ' .. str(at)) end
  local limits = {}
  local seen = {}
  for i = 1, n do
    local base = 2 + 5 * (i - 1)
    local number = tonumber(ARGV[base + 1])
    local algorithm = ALGORITHMS[number]
    if algorithm == nil then fail('unknown algorithm ' .. tostring(ARGV[base + 1])) end
    local capacity, period, cost = limit_args(number, ARGV[base + 2], ARGV[base + 3], ARGV[base + 4])
    if seen[KEYS[i]] then fail("key '" .. KEYS[i] .. "' appears twice in one refund") end
    seen[KEYS[i]] = true
    local reset_after = integer_arg(ARGV[base + 5], 'reset_after')
    if reset_after < 0 then fail('reset_after must be >= 0, got ' .. str(reset_after)) end
    limits[i] = {algorithm = algorithm, capacity = capacity, period = period, cost = cost,
                 reset_after = reset_after}
  end
  local now = resolve_now(ARGV[2])

  local out = {}
  for i = 1, n do
    local l = limits[i]
    local refunded = l.algorithm.refund(KEYS[i], l.capacity, l.period, l.cost, at, now,
                                             at + l.reset_after)
    local peek, store = l.algorithm.step(KEYS[i], l.capacity, l.period, 0, now)
    if store then store() end
    out[#out + 1] = refunded and 1 or 0
    for j = 1, 5 do out[#out + 1] = peek[j] end
  end
  return out
end
