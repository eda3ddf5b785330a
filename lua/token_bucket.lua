-- Token bucket in GCRA form, line by line as src/algorithms/token_bucket.cpp. The key is a
-- string holding the theoretical arrival time `tat` in µs; it expires when the bucket is full.

-- One decision from the stored `tat` (0: a full bucket): allowed, remaining, retry_after,
-- reset_after, and the `tat` to store afterwards.
local function gcra(stored, capacity, interval, cost, now)
  local tau = capacity * interval
  local tat = math.max(stored, now)
  local new_tat = tat + cost * interval
  if new_tat - now <= tau then
    return true, cdiv(tau - (new_tat - now), interval), 0, new_tat - now, cost > 0 and new_tat or stored
  end
  return false, cdiv(math.max(0, tau - (tat - now)), interval), new_tat - now - tau, tat - now, stored
end

local function read_tat(key)
  local value, exists = read_string(key)
  return value and string.match(value, '^%d+$') and tonumber(value) or 0, exists
end

-- Stores `t` after steps that consumed (when `consumed`), or forgets a bucket full again.
local function store_tat(key, t, consumed, exists, now)
  local expires_at = t > now and t or 0
  if consumed then
    return function() write_string(key, str(t), expiry(expires_at)) end
  elseif expires_at == 0 and exists then
    return function() delete_string(key) end
  end
end

local function token_bucket(key, capacity, interval, cost, now)
  local stored, exists = read_tat(key)
  local allowed, remaining, retry_after, reset_after, t = gcra(stored, capacity, interval, cost, now)
  return {allowed and 1 or 0, capacity, remaining, retry_after, reset_after},
         store_tat(key, t, allowed and cost > 0, exists, now)
end

-- `repeats` identical checks one after the other at `now`: their decisions up to and
-- including the first denial (the ones after it are the same denial), and one store.
local function token_bucket_repeated(key, capacity, interval, cost, now, repeats)
  local stored, exists = read_tat(key)
  local t = stored
  local decisions = {}
  for r = 1, repeats do
    local allowed, remaining, retry_after, reset_after
    allowed, remaining, retry_after, reset_after, t = gcra(t, capacity, interval, cost, now)
    decisions[r] = {allowed and 1 or 0, capacity, remaining, retry_after, reset_after}
    if not allowed then break end
  end
  return decisions, store_tat(key, t, t ~= stored, exists, now)
end
