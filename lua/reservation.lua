-- Entries of the reservation scripts (Store::reserve, Store::settle): a check admitted at an
-- estimated cost, settled later to the actual cost, one atomic call each way. Token bucket
-- (0) and fixed window (3) limits only, as algorithms::reservable.
--
-- "reserve": KEYS = {record, k1..kN}; ARGV = {now_us, ttl_us, first, count, then per key:
-- algorithm, capacity, period_us, cost}. "multi" over k1..kN at the estimated costs; when it
-- admits, the record of keys k_first .. k_(first+count-1) (those of the rule that reserves)
-- is written, one string that expires ttl_us later: "R1;<at>" (the instant decided at), then
-- per key ";<length of the key>:<key>:<cost>:<reset_after_us>". Reply: "multi"'s, then the
-- instant decided at.
--
-- "settle": KEYS = {record, k1..kN}; ARGV = {now_us, then per key: algorithm, capacity,
-- period_us, actual cost}. When the record exists, each key it holds is settled from its
-- estimate to the actual cost (algorithms::settle: what is below the estimate goes back as
-- a refund, what is above is charged as debt) and the record is deleted, so a second settle
-- of the same reservation does nothing; a record expired or never written leaves the
-- estimate charged. Reply: 1 when settled, 0 when there was no record.
--
-- Concurrency limits (4) are held the same way: "reserve" takes a slot of each one the record
-- holds, the record key its member (lua/concurrency.lua); "settle" gives it back (its actual
-- cost is not used). An actual cost of -1 (store::kAsEstimated) leaves a rate limit as
-- reserved.
--
-- "renew": KEYS = {record, k1..kN}; ARGV = {now_us, ttl_us, then per key: algorithm, capacity,
-- period_us, cost (not used)}. When the record exists, it is kept ttl_us more and each slot it
-- holds is moved to expire period_us from now. Reply: 1 when the record and every slot were
-- still held, 0 otherwise (a slot reclaimed is not taken again).

local RESERVABLE = {[0] = token_bucket, [3] = fixed_window, [4] = concurrency}
local MAX_CHARGED = 2 * MAX_WINDOW_LIMIT  -- algorithms::kMaxCharged

-- As algorithms::charge: `units` taken at `now` whatever is left.
local function charge_token_bucket(key, interval, units, now)
  local tat = tat_value(read_string(key))
  local from = math.max(tat, now)
  local room = now + MAX_HORIZON - from
  local debt = units * interval > room and room or units * interval
  local t = from + math.max(0, debt)
  if t > now then
    write_string(key, str(t), expiry(t))
  else
    delete_string(key)
  end
end

local function charge_fixed_window(key, window, units, now)
  local value = read_string(key)
  local t, current = 0, 0
  if value then
    local a, b = string.match(value, '^(%d+):(%d+)$')
    if a then t, current = tonumber(a), tonumber(b) end
  end
  local aligned = cdiv(now, window) * window
  if t < aligned then
    t = aligned
    current = 0
  end
  current = math.min(current + math.min(units, MAX_CHARGED), MAX_CHARGED)
  if current > 0 then
    write_string(key, str(t) .. ':' .. str(current), expiry(t + window))
  else
    delete_string(key)
  end
end


-- A record's instant and, by key, {estimate, reset_after}; nil when `value` is not a record
-- (absent, another type, another format: nothing to settle, and nothing is deleted).
local function parse_record(value)
  if type(value) ~= 'string' or string.sub(value, 1, 3) ~= 'R1;' then return nil end
  local at, pos = string.match(value, '^(%d+)()', 4)
  if not at then return nil end
  local entries = {}
  while pos <= #value do
    local length, first = string.match(value, '^;(%d+):()', pos)
    if not length then return nil end
    local last = first + tonumber(length) - 1
    local cost, reset_after, after = string.match(value, '^:(%d+):(%d+)()', last + 1)
    if not cost then return nil end
    entries[string.sub(value, first, last)] = {tonumber(cost), tonumber(reset_after)}
    pos = after
  end
  return tonumber(at), entries
end

local function check_record_key(n)
  if n < 1 then fail('expected the record and at least 1 key') end
  for i = 2, n + 1 do
    if KEYS[i] == KEYS[1] then fail("the record '" .. KEYS[1] .. "' is one of the keys") end
  end
end

local function run_reserve()
  local n = #KEYS - 1
  if #ARGV ~= 4 + 4 * n then
    fail('expected now_us, ttl_us, first, count, then algorithm, capacity, period_us, cost per key')
  end
  check_record_key(n)
  local ttl = integer_arg(ARGV[2], 'ttl')
  if ttl < 1 or ttl > MAX_HORIZON then fail('ttl must be between 1 and 2^51 us, got ' .. str(ttl)) end
  local first = integer_arg(ARGV[3], 'first')
  local last = first + integer_arg(ARGV[4], 'count') - 1
  if first < 1 or last < first or last > n then fail('the recorded keys must be some of the keys') end
  local limits = parse_limits(2, n, 5)
  for i = first, last do
    local step = limits[i].step
    if step ~= token_bucket and step ~= fixed_window and step ~= concurrency then
      fail('only token bucket (0), fixed window (3) and concurrency (4) limits can be reserved')
    end
    if step == concurrency then limits[i].member = KEYS[1] end
  end
  local now = resolve_now(ARGV[1])
  local out = check_all(limits, now)
  if out[1] == 1 then
    local parts = {'R1;' .. str(now)}
    for i = first, last do
      local key = limits[i].key
      parts[#parts + 1] = str(#key) .. ':' .. key .. ':' .. str(limits[i].cost) .. ':' .. str(out[5 * i + 5])
    end
    redis.call('SET', KEYS[1], table.concat(parts, ';'), 'PX', str(math.ceil(ttl / 1000)))
  end
  out[#out + 1] = now
  return out
end

-- The held limits of "settle" and "renew": KEYS[2..n+1], their arguments from ARGV[arg] on.
local function held_limits(n, arg)
  local limits = {}
  for i = 1, n do
    local base = arg + 4 * (i - 1)
    local algorithm = tonumber(ARGV[base])
    if RESERVABLE[algorithm] == nil then
      fail('only token bucket (0), fixed window (3) and concurrency (4) limits can be reserved, got ' ..
           tostring(ARGV[base]))
    end
    local capacity, period = limit_args(algorithm, ARGV[base + 1], ARGV[base + 2], '0')
    local actual = integer_arg(ARGV[base + 3], 'actual cost')
    if actual ~= -1 and (actual < 0 or actual > MAX_CHARGED) then
      fail('the actual cost must be between 0 and 2^41, or -1, got ' .. str(actual))
    end
    limits[i] = {key = KEYS[i + 1], algorithm = algorithm, capacity = capacity, period = period, actual = actual}
  end
  return limits
end

local function run_settle()
  local n = #KEYS - 1
  if #ARGV ~= 1 + 4 * n then
    fail('expected now_us, then algorithm, capacity, period_us, actual cost per key')
  end
  check_record_key(n)
  local limits = held_limits(n, 2)
  local now = resolve_now(ARGV[1])
  local at, entries = parse_record(redis.pcall('GET', KEYS[1]))
  if not at then return 0 end
  for i = 1, n do
    local l = limits[i]
    local entry = entries[l.key]
    if entry and l.algorithm == CONCURRENCY then
      release_slot(l.key, KEYS[1])
    elseif entry and l.actual ~= -1 then
      local estimate, reset_after = entry[1], entry[2]
      if l.actual < estimate then
        local units = estimate - l.actual
        if l.algorithm == TOKEN_BUCKET then
          refund_token_bucket(l.key, l.capacity, l.period, units, at, now, at + reset_after)
        else
          refund_fixed_window(l.key, l.capacity, l.period, units, at, now, at + reset_after)
        end
      elseif l.actual > estimate then
        if l.algorithm == TOKEN_BUCKET then
          charge_token_bucket(l.key, l.period, l.actual - estimate, now)
        else
          charge_fixed_window(l.key, l.period, l.actual - estimate, now)
        end
      end
    end
  end
  redis.call('DEL', KEYS[1])
  return 1
end

local function run_renew()
  local n = #KEYS - 1
  if #ARGV ~= 2 + 4 * n then
    fail('expected now_us, ttl_us, then algorithm, capacity, period_us, cost per key')
  end
  check_record_key(n)
  local ttl = integer_arg(ARGV[2], 'ttl')
  if ttl < 1 or ttl > MAX_HORIZON then fail('ttl must be between 1 and 2^51 us, got ' .. str(ttl)) end
  local limits = held_limits(n, 3)
  local now = resolve_now(ARGV[1])
  local at, entries = parse_record(redis.pcall('GET', KEYS[1]))
  if not at then return 0 end
  redis.call('PEXPIRE', KEYS[1], str(math.ceil(ttl / 1000)))
  local all = 1
  for i = 1, n do
    local l = limits[i]
    if entries[l.key] and l.algorithm == CONCURRENCY and not renew_slot(l.key, l.period, KEYS[1], now) then
      all = 0
    end
  end
  return all
end
