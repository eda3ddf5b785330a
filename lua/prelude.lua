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
local MAX_LOG_COST = 1000        -- algorithms::kMaxLogCost
local TOKEN_BUCKET = 0           -- the algorithm numbers of enum algorithms::Algorithm
local SLIDING_WINDOW_LOG = 1
local CONCURRENCY = 4
local MAX_CONCURRENCY = 2 ^ 20   -- algorithms::kMaxConcurrency

-- The library functions of the hot path, as locals: bound by every entry before it runs
-- (a library of functions cannot read them while it is loaded, only when called).
local match, floor, ceil, format, to_number, redis_call

local function bind_globals()
  match, floor, ceil, format = string.match, math.floor, math.ceil, string.format
  to_number, redis_call = tonumber, redis.call
end

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

-- Integer arguments already converted, by their text: the same limits come with every call,
-- and converting text (strtod) costs more than the lookup. A library of functions keeps it
-- from call to call (a script starts with it empty); bounded: emptied when it is full.
local integers, integers_held = {}, 0
local MAX_INTEGERS_HELD = 4096

local function integer_arg(text, field)
  local n = integers[text]
  if n then return n end
  n = tonumber(text)
  if n == nil or n ~= math.floor(n) or n <= -MAX_EXACT or n >= MAX_EXACT then
    fail(field .. ' must be an integer, got ' .. tostring(text))
  end
  if integers_held == MAX_INTEGERS_HELD then integers, integers_held = {}, 0 end
  integers[text], integers_held = n, integers_held + 1
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
  elseif algorithm == CONCURRENCY and capacity > MAX_CONCURRENCY then
    fail('limit must be at most 2^20 requests in flight, got ' .. str(capacity))
  elseif capacity > MAX_WINDOW_LIMIT then
    fail('limit must be at most 2^40 per window, got ' .. str(capacity))
  elseif period > MAX_WINDOW then
    fail('window must be at most 2^45 microseconds, got ' .. str(period))
  end
  if cost < 0 then fail('cost must be >= 0, got ' .. str(cost)) end
  if cost > capacity then
    fail('cost ' .. str(cost) .. ' exceeds capacity ' .. str(capacity) .. ': it can never be admitted')
  end
  if algorithm == CONCURRENCY and cost > 1 then
    fail('cost ' .. str(cost) .. ' of a concurrency limit: a request holds one slot (cost 0 or 1)')
  end
  if algorithm == SLIDING_WINDOW_LOG and cost > MAX_LOG_COST then
    fail('cost ' .. str(cost) .. ' is above ' .. str(MAX_LOG_COST) .. ', the most a sliding window log takes in one check')
  end
  return capacity, period, cost
end

-- The instant of this call: the argument, or the server's clock when it is -1. Key
-- lifetimes follow the same clock: absolute (PXAT) on the server clock, relative (PX) to
-- an explicit `now`, which need not be the server's.
-- The argument may carry the call's deadline on the server's clock, "now:deadline" (µs): a
-- call that runs after it (it waited in a stopped or busy server while its caller gave up)
-- does nothing and answers a TIMEOUT error. Every entry resolves `now` before it writes.
local clock = {now = 0, server = false}

local function resolve_now(text)
  local deadline = nil
  local colon = string.find(text, ':', 1, true)
  if colon then
    deadline = tonumber(string.sub(text, colon + 1))
    if deadline == nil or deadline ~= math.floor(deadline) or deadline < 0 or deadline >= MAX_EXACT then
      fail('deadline must be an integer >= 0, got ' .. string.sub(text, colon + 1))
    end
    text = string.sub(text, 1, colon - 1)
  end
  local now = integer_arg(text, 'now')
  local server_now = nil
  if now == -1 or deadline then
    local t = redis.call('TIME')
    server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  if deadline and server_now > deadline then
    error({err = 'TIMEOUT ratekeeper: the call ran ' .. str(server_now - deadline) ..
                 ' us after its deadline: nothing done'})
  end
  if now == -1 then
    clock.now = server_now
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
-- the functions below. The batch script turns on a read cache: every key of the call is
-- read at once (one MGET) and each write also updates the cached value, so that the checks
-- of one call see each other's writes. A key holding another type reads as absent (MGET does
-- not tell it apart): a write replaces it. Values are strings: integers are written with str
-- (a number given to redis.call is formatted with "%.17g", exact but several times slower).
local cache = nil  -- key -> value (false: absent); the cache is on when set

-- A string key's value (false when it is absent or holds another type), and whether it
-- exists.
local function read_string(key)
  if cache then
    local value = cache[key]
    if value ~= nil then return value, value ~= false end
  end
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then return false, false end
  if cache then cache[key] = value end
  return value, value ~= false
end

-- SET key value option [ms], option one of PX, PXAT (with ms) or KEEPTTL.
local function write_string(key, value, option, ms)
  if ms then redis.call('SET', key, value, option, ms) else redis.call('SET', key, value, option) end
  if cache then cache[key] = value end
end

local function delete_string(key)
  redis.call('DEL', key)
  if cache then cache[key] = false end
end

-- Forgets the cached value of `key`: the sliding window log reads and writes the key itself.
local function forget_string(key)
  if cache then cache[key] = nil end
end

-- Turns the read cache on, with the values of `keys` read in MGETs; off with `keys` nil.
local function cache_strings(keys)
  if keys == nil then
    cache = nil
    return
  end
  cache = {}
  for first = 1, #keys, 1024 do  -- unpack's arguments stay far below Lua's stack limit
    local last = math.min(#keys, first + 1023)
    local values = redis.call('MGET', unpack(keys, first, last))
    for i = first, last do cache[keys[i]] = values[i - first + 1] end
  end
end

-- A step returns the decision {allowed (1/0), limit, remaining, retry_after, reset_after}
-- and, when the state to store differs from the stored one, a function that stores it.
-- Until that function runs nothing is written, apart from forgetting expired entries.
