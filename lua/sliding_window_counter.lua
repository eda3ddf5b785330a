-- Sliding window counter, line by line as src/algorithms/sliding_window_counter.cpp. The key
-- is a string "<window start µs>:<current count>:<previous count>" that expires when the
-- window that could still count ends.

-- a·b / c, the quotient and the remainder, for 0 <= a < 2^42, 0 <= b <= 2^45, 0 < c <= 2^45
-- (a count, a time and a window), exact although a·b may reach 2^87: when the product
-- reaches 2^53 it is taken seven bits of `a` at a time, the remainder carried, so that no
-- intermediate value reaches 2^53.
local function mul_div(a, b, c)
  if a * b < MAX_EXACT then
    local p = a * b
    local q = cdiv(p, c)
    return q, p - q * c
  end
  local q, r = 0, 0
  for shift = 35, 0, -7 do
    local x = r * 128 + cdiv(a, 2 ^ shift) % 128 * b
    local d = cdiv(x, c)
    q = q * 128 + d
    r = x - d * c
  end
  return q, r
end

local function sliding_window_counter(key, limit, window, cost, now)
  local value, exists = read_string(key)
  local t, current, previous = 0, 0, 0
  if value then
    local a, b, c = string.match(value, '^(%d+):(%d+):(%d+)$')
    if a then t, current, previous = tonumber(a), tonumber(b), tonumber(c) end
  end

  local aligned = cdiv(now, window) * window
  local rolled = false
  if t < aligned then
    previous = t + window == aligned and current or 0
    current = 0
    t = aligned
    rolled = true
  end
  local elapsed = math.min(math.max(now - t, 0), window)
  local weight = window - elapsed
  -- The previous window's part, rounded up: n fits iff it + current + n <= limit.
  local part, rest = mul_div(previous, weight, window)
  local weighted = rest > 0 and part + 1 or part

  local allowed = weighted + current + cost <= limit
  local retry_after = 0
  if allowed then
    current = current + cost
  elseif current + cost <= limit then
    -- Wait inside this window until the previous window's weight has decayed enough.
    local lag = math.max(0, t - now)
    retry_after = lag + weight - mul_div(limit - current - cost, window, previous)
  else
    -- Wait for the next window, then until this window's count has decayed enough.
    local next_window = t + window - now
    retry_after = next_window + math.max(0, window - mul_div(limit - cost, window, current))
  end
  local remaining = math.max(0, limit - current - weighted)
  local expires_at = 0
  if current > 0 then
    expires_at = t + 2 * window
  elseif previous > 0 then
    expires_at = t + window
  end
  local reset_after = expires_at > 0 and expires_at - now or 0

  local store
  local state = str(t) .. ':' .. str(current) .. ':' .. str(previous)
  if allowed and cost > 0 then
    store = function() write_string(key, state, expiry(expires_at)) end
  elseif expires_at == 0 then
    if exists then store = function() delete_string(key) end end
  elseif rolled then
    -- The same expiry as before: rolling over moves the count, not the end of its window.
    store = function() write_string(key, state, 'KEEPTTL') end
  end
  return {allowed and 1 or 0, limit, remaining, retry_after, reset_after}, store
end
