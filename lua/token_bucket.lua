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

-- The `tat` a key's value holds: 0 when absent or not a count of µs.
local function tat_value(value)
  return value and string.match(value, '^%d+$') and tonumber(value) or 0
end

local function read_tat(key)
  local value, exists = read_string(key)
  return tat_value(value), exists
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

-- The same step, its store done at once: the decision as 4 values (allowed 1/0, remaining,
-- retry_after, reset_after), without a table or a closure: the hot path of the batch and
-- single-key scripts, gcra and the store of token_bucket written out (each Lua function call
-- and global lookup costs the server time on every decision).
local function token_bucket_now(key, capacity, interval, cost, now)
  local value
  if cache then value = cache[key] end
  if value == nil then value = read_string(key) end
  local stored = value and match(value, '^%d+$') and to_number(value) or 0
  local tau = capacity * interval
  local tat = stored > now and stored or now
  local after = tat - now + cost * interval  -- new_tat − now
  if after <= tau then
    if cost > 0 then
      local t = tat + cost * interval
      local option, ms = 'PX', ceil(after / 1000)
      if clock.server then option, ms = 'PXAT', ceil(t / 1000) end
      value = format('%d', t)
      redis_call('SET', key, value, option, format('%d', ms))
      if cache then cache[key] = value end
    elseif value and stored <= now then
      delete_string(key)  -- full again
    end
    return 1, floor((tau - after) / interval), 0, after
  end
  if value and stored <= now then delete_string(key) end
  local room = tau - (tat - now)
  return 0, room > 0 and floor(room / interval) or 0, after - tau, tat - now
end

local function token_bucket(key, capacity, interval, cost, now)
  local stored, exists = read_tat(key)
  local allowed, remaining, retry_after, reset_after, t = gcra(stored, capacity, interval, cost, now)
  return {allowed and 1 or 0, capacity, remaining, retry_after, reset_after},
         store_tat(key, t, allowed and cost > 0, exists, now)
end

-- A request checked at `now` admitted as if it arrived at now + delay, the decision told from
-- `now` (token_bucket::step_delayed, line by line): the caller chose `delay` so that it admits.
local function token_bucket_delayed(key, capacity, interval, cost, now, delay)
  local stored, exists = read_tat(key)
  local allowed, remaining, retry_after, reset_after, t = gcra(stored, capacity, interval, cost, now + delay)
  if allowed then
    reset_after = reset_after + delay
    remaining = cdiv(math.max(0, capacity * interval - reset_after), interval)
  end
  return {allowed and 1 or 0, capacity, remaining, retry_after, reset_after},
         store_tat(key, t, allowed and cost > 0, exists, now)
end

-- `repeats` identical checks one after the other at `now`, in closed form: how many are
-- admitted (a prefix: a denial changes nothing, so the checks after it are denied alike),
-- and one store. Returns {admitted, the first decision if admitted > 0, the denial if
-- admitted < repeats}; the k-th admitted decision is the first with remaining lower by
-- (k - 1)·cost and reset_after longer by (k - 1)·cost·interval (RedisStore derives them).
local function token_bucket_repeated(key, capacity, interval, cost, now, repeats)
  local stored, exists = read_tat(key)
  local reply = {0}
  local t = stored
  local allowed, remaining, retry_after, reset_after = gcra(stored, capacity, interval, cost, now)
  local admitted = 0
  if allowed then
    admitted = repeats
    if cost > 0 then
      -- Admitted k-th iff max(tat, now) + k·cost·interval − now <= tau.
      local room = capacity * interval - (math.max(stored, now) - now)
      admitted = math.min(repeats, cdiv(room, cost * interval))
      t = math.max(stored, now) + admitted * cost * interval
    end
    for _, v in ipairs({1, capacity, remaining, retry_after, reset_after}) do reply[#reply + 1] = v end
  end
  if admitted < repeats then
    allowed, remaining, retry_after, reset_after = gcra(t, capacity, interval, cost, now)
    for _, v in ipairs({0, capacity, remaining, retry_after, reset_after}) do reply[#reply + 1] = v end
  end
  reply[1] = admitted
  return reply, store_tat(key, t, t ~= stored, exists, now)
end
