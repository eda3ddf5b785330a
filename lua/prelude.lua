-- ratekeeper: shared by every script. Lua numbers are doubles: every value stays below 2^53
-- (the bounds of Limit::make: a token bucket's capacity × interval at most 2^51, a window's
-- limit at most 2^40 and its length at most 2^45 µs, with products beyond 2^53 taken apart,
-- see mul_div), so integer arithmetic here is exact, and a quotient of two integers rounds
-- the same way as in C++ through cdiv.

local MAX_EXACT = 2 ^ 53
local MAX_HORIZON = 2 ^ 51       -- token bucket: capacity × interval
local MAX_WINDOW_LIMIT = 2 ^ 40  -- algorithms::kMaxWindowLimit
local MAX_WINDOW = 2 ^ 45        -- algorithms::kMaxWindow
local MAX_DELAY = 3600 * 1000000  -- algorithms::kMaxDelay
local TOKEN_BUCKET = 0           -- the algorithm numbers of enum algorithms::Algorithm

local function fail(message)
  error({err = 'ERR ratekeeper: ' .. message})
end

-- C++ integer division: the quotient truncated toward zero.
local function cdiv(a, b)
  local q = a / b
  if q < 0 then return math.ceil(q) end
  return math.floor(q)
end

-- Decimal text of an integer, without the exponent or rounding of Lua's own conversion.
local function str(n)
  return string.format('%d', n)
end

local function integer_arg(text, field)
  local n = tonumber(text)
  if n == nil or n ~= math.floor(n) or n <= -MAX_EXACT or n >= MAX_EXACT then
    fail(field .. ' must be an integer, got ' .. tostring(text))
  end
  return n
end

-- One limit's arguments, checked as Limit::make and validate_cost check them; `algorithm`
-- is its number (0: token bucket, otherwise a window).
local function limit_args(algorithm, capacity_text, period_text, cost_text)
  local capacity = integer_arg(capacity_text, 'capacity')
  local period = integer_arg(period_text, 'period')
  local cost = integer_arg(cost_text, 'cost')
  if capacity < 1 then fail('capacity must be >= 1, got ' .. str(capacity)) end
  if period < 1 then fail('period must be >= 1 microsecond, got ' .. str(period)) end
  if algorithm == TOKEN_BUCKET then
    if capacity > MAX_HORIZON / period then
      fail('capacity x refill interval must stay below 2^51 microseconds')
    end
  elseif capacity > MAX_WINDOW_LIMIT then
    fail('limit must be at most 2^40 per window, got ' .. str(capacity))
  elseif period > MAX_WINDOW then
    fail('window must be at most 2^45 microseconds, got ' .. str(period))
  end
  if cost < 0 then fail('cost must be >= 0, got ' .. str(cost)) end
  if cost > capacity then
    fail('cost ' .. str(cost) .. ' exceeds capacity ' .. str(capacity) .. ': it can never be admitted')
  end
  return capacity, period, cost
end

-- The instant of this call: the argument, or the server's clock when it is -1. Key
-- lifetimes follow the same clock: absolute (PXAT) on the server clock, relative (PX) to
-- an explicit `now`, which need not be the server's.
local clock = {now = 0, server = false}

local function resolve_now(text)
  local now = integer_arg(text, 'now')
  if now == -1 then
    local t = redis.call('TIME')
    clock.now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    clock.server = true
  elseif now < 0 then
    fail('now must be >= 0, or -1 for the server clock, got ' .. str(now))
  else
    clock.now = now
    clock.server = false
  end
  return clock.now
end

-- SET options that keep a key until `expires_at` (µs, > now), rounded up to the
-- millisecond: a key never expires while its state still counts.
local function expiry(expires_at)
  if clock.server then return 'PXAT', str(math.ceil(expires_at / 1000)) end
  return 'PX', str(math.ceil((expires_at - clock.now) / 1000))
end

-- The same for a key written by other commands than SET.
local function expire(key, expires_at)
  local option, ms = expiry(expires_at)
  redis.call(option == 'PXAT' and 'PEXPIREAT' or 'PEXPIRE', key, ms)
end

-- String keys (every algorithm but the sliding window log) are read and written through
-- the functions below. The batch script turns on a write-back cache: a key that several
-- checks of one call touch is read once and written once, by flush_strings at the end, with
-- the expiry of its last write. The values seen are the same as without the cache.
local cache = nil  -- key -> {value, exists, dirty, option, ms}

-- A string key's value (false when it is absent or holds another type), and whether the
-- key exists at all.
local function read_string(key)
  local e = cache and cache[key]
  if e then return e.value, e.exists end
  local value = redis.pcall('GET', key)
  local exists = true
  if type(value) == 'table' then
    value = false
  else
    exists = value ~= false
  end
  if cache then cache[key] = {value = value, exists = exists} end
  return value, exists
end

-- SET key value option [ms], option one of PX, PXAT (with ms) or KEEPTTL.
local function write_string(key, value, option, ms)
  if not cache then
    if ms then redis.call('SET', key, value, option, ms) else redis.call('SET', key, value, option) end
    return
  end
  local e = cache[key] or {}
  cache[key] = e
  if option ~= 'KEEPTTL' or not e.option or e.option == 'KEEPTTL' then
    e.option, e.ms = option, ms
  end  -- else KEEPTTL after a cached PX/PXAT keeps that expiry, as Redis would
  e.value, e.exists, e.dirty = value, true, true
end

local function delete_string(key)
  if not cache then
    redis.call('DEL', key)
    return
  end
  local e = cache[key] or {}
  cache[key] = e
  e.value, e.exists, e.dirty, e.option, e.ms = false, false, true, nil, nil
end

-- Writes what the cache holds for `key` (every key when nil) and forgets it.
local function flush_strings(key)
  if not cache then return end
  local entries = cache
  if key ~= nil then
    if not cache[key] then return end
    entries = {[key] = cache[key]}
  end
  local saved = cache
  cache = nil  -- write_string and delete_string write through
  for k, e in pairs(entries) do
    if e.dirty then
      if e.exists then write_string(k, e.value, e.option, e.ms) else delete_string(k) end
    end
    saved[k] = nil
  end
  cache = saved
end

-- Turns the write-back cache on (the batch script).
local function cache_strings()
  cache = {}
end

-- A step returns the decision {allowed (1/0), limit, remaining, retry_after, reset_after}
-- and, when the state to store differs from the stored one, a function that stores it.
-- Until that function runs nothing is written, apart from forgetting expired entries.
