-- Entry of the multi-key script: several limits checked at one instant and consumed from
-- all of them or from none, as algorithms::step_all. KEYS = k1..kN; ARGV = {now_us, then per
-- key: algorithm, capacity, period_us, cost}, algorithm 0 token bucket, 1 sliding window
-- log, 2 sliding window counter, 3 fixed window, 4 concurrency (enum algorithms::Algorithm;
-- a concurrency slot is taken only by "reserve", lua/reservation.lua). Returns the
-- combined decision, then each key's decision, 5 integers each.
local STEPS = {
  [0] = token_bucket,
  [1] = sliding_window_log,
  [2] = sliding_window_counter,
  [3] = fixed_window,
  [4] = concurrency,
}

-- As algorithms::combine. Allowed: the limit with the fewest remaining units, the largest
-- reset_after. Denied: the limit that frees up last gives limit, remaining and retry_after;
-- reset_after is the largest.
local function combine(items)
  if #items == 0 then return {1, 0, 0, 0, 0} end
  local allowed = true
  for _, d in ipairs(items) do allowed = allowed and d[1] == 1 end
  local binding = items[1]
  for _, d in ipairs(items) do
    if (allowed and d[3] < binding[3]) or (not allowed and d[4] > binding[4]) then binding = d end
  end
  local out = {allowed and 1 or 0, binding[2], binding[3], binding[4], binding[5]}
  for _, d in ipairs(items) do out[5] = math.max(out[5], d[5]) end
  return out
end

-- The limits of keys KEYS[first], ..., KEYS[first + n - 1], their arguments from ARGV[arg]
-- on (algorithm, capacity, period_us, cost per key, `stride` arguments per key: 4 when
-- omitted), checked before anything is read or written.
local function parse_limits(first, n, arg, stride)
  local limits = {}
  local seen = {}
  for i = 1, n do
    local base = arg + (stride or 4) * (i - 1)
    local algorithm = tonumber(ARGV[base])
    local step = STEPS[algorithm]
    if step == nil then fail('unknown algorithm ' .. tostring(ARGV[base])) end
    local capacity, period, cost = limit_args(algorithm, ARGV[base + 1], ARGV[base + 2], ARGV[base + 3])
    local key = KEYS[first + i - 1]
    if seen[key] then fail("key '" .. key .. "' appears twice in one check") end
    seen[key] = true
    limits[i] = {key = key, step = step, capacity = capacity, period = period, cost = cost, max_delay = 0}
  end
  return limits
end

-- The send delay of a check denied at one instant (algorithms::schedule_delay): the largest
-- retry_after of its items when every limit is a token bucket and each item's retry_after is
-- within its max_delay; 0 (deny) otherwise.
local function schedule_delay(limits, items)
  local delay = 0
  for i = 1, #limits do
    if limits[i].step ~= token_bucket then return 0 end
    if items[i][1] == 0 then
      if items[i][4] > limits[i].max_delay then return 0 end
      delay = math.max(delay, items[i][4])
    end
  end
  return delay
end

-- Checks `limits` at `now`, consuming from all of them or from none. Returns the combined
-- decision, then each key's decision, 5 integers each; and the delay of the check (0 unless
-- `limits.delays`, set by multi_delay.lua: a check denied now may then be admitted with
-- one send time, as algorithms::step_all with max_delays).
local function check_all(limits, now)
  local n = #limits
  local items, stores = {}, {}
  local allowed = true
  for i = 1, n do
    local l = limits[i]
    items[i], stores[i] = l.step(l.key, l.capacity, l.period, l.cost, now, l.member)
    allowed = allowed and items[i][1] == 1
  end
  local delay = 0
  if not allowed and limits.delays then
    delay = schedule_delay(limits, items)
    if delay > 0 then
      for i = 1, n do
        local l = limits[i]
        items[i], stores[i] = token_bucket_delayed(l.key, l.capacity, l.period, l.cost, now, delay)
      end
      allowed = true
    end
  end
  if not allowed then
    -- Nothing is consumed: the limits that would have admitted report their state as a peek.
    for i = 1, n do
      if items[i][1] == 1 then
        local l = limits[i]
        items[i], stores[i] = l.step(l.key, l.capacity, l.period, 0, now)
      end
    end
  end
  for i = 1, n do
    if stores[i] then stores[i]() end
  end

  local out = combine(items)
  for i = 1, n do
    for j = 1, 5 do out[#out + 1] = items[i][j] end
  end
  return out, delay
end

local function run_multi()
  local n = #KEYS
  if #ARGV ~= 1 + 4 * n then
    fail('expected now_us, then algorithm, capacity, period_us, cost per key')
  end
  local limits = parse_limits(1, n, 2)
  local out = check_all(limits, resolve_now(ARGV[1]))
  return out
end
