-- Concurrency slots, as src/algorithms/concurrency.cpp: the requests in flight of one key, a
-- sorted set whose members are the reservations holding a slot (their record keys, see
-- lua/reservation.lua), each scored by when its slot expires (µs). Expired slots are
-- reclaimed by every call that reads the key; the key itself expires with its last slot. A
-- slot is taken only with a `member` (by "reserve"): a check of cost 1 without one is
-- refused before anything is written.
local CONCURRENCY_RETRY_AFTER = 1000000  -- algorithms::kConcurrencyRetryAfter

-- The score of the first (`index` 0) or last (-1) slot of `key`.
local function slot_score(key, index)
  local r = redis.call('ZRANGE', key, index, index, 'WITHSCORES')
  return tonumber(r[2])
end

-- Forgets the slots of `key` expired at `now`; answers how many are left, or nil when the key
-- holds another type (read as absent; a write replaces it).
local function live_slots(key, now)
  local r = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', str(now))
  if type(r) == 'table' and r.err then return nil end
  return redis.call('ZCARD', key)
end

local function concurrency(key, capacity, ttl, cost, now, member)
  if cost > 0 and member == nil then
    fail("'" .. key .. "' is a concurrency limit: its slot is taken by a reservation, which releases it")
  end
  local held = live_slots(key, now)
  local wrong_type = held == nil
  held = held or 0
  local allowed = held + cost <= capacity
  local remaining, retry_after = 0, 0
  local last = 0
  if held > 0 then last = slot_score(key, -1) end
  if allowed then
    remaining = capacity - held - cost
    if cost > 0 then last = math.max(last, now + ttl) end
  else
    retry_after = math.min(math.max(slot_score(key, 0) - now, 1), CONCURRENCY_RETRY_AFTER)
  end
  local reset_after = last > 0 and last - now or 0
  local store
  if allowed and cost > 0 then
    store = function()
      if wrong_type then redis.call('DEL', key) end
      redis.call('ZADD', key, str(now + ttl), member)
      expire(key, last)
    end
  end
  return {allowed and 1 or 0, capacity, remaining, retry_after, reset_after}, store
end

-- Gives back `member`'s slot of `key`, if it still holds one.
local function release_slot(key, member)
  redis.pcall('ZREM', key, member)
end

-- Moves `member`'s slot of `key` to now + ttl; false when it holds none (its slot expired and
-- was reclaimed: it is not taken again).
local function renew_slot(key, ttl, member, now)
  if live_slots(key, now) == nil or redis.call('ZSCORE', key, member) == false then return false end
  redis.call('ZADD', key, 'XX', str(now + ttl), member)
  expire(key, slot_score(key, -1))
  return true
end
