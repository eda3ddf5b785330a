-- Sliding window log, line by line as src/algorithms/sliding_window_log.cpp. The key is a
-- sorted set with one member per admitted unit of cost, scored by its time in µs. The k-th
-- entry at one time (k = 0, 1, ...) is unique: entries leave the set a whole score at a
-- time, so the entries at one time are always k = 0 .. ZCOUNT-1 and a new one takes
-- k = ZCOUNT. The member is "<time><k, 3 digits>" while k < 1000, a number below 2^63 that
-- Redis stores as an 8-byte integer, and "<time>:<k>" beyond.
-- The key expires when its newest entry leaves the window.
local ZADD_BATCH = 256

local function log_member(at, k)
  if k < 1000 then return at .. string.format('%03d', k) end
  return at .. ':' .. str(k)
end

local function sliding_window_log(key, limit, window, cost, now)
  forget_string(key)  -- a zset: not cached
  -- The window is (now − W, now]: an entry stamped ts stops counting at ts + W.
  if type(redis.pcall('ZREMRANGEBYSCORE', key, '-inf', str(now - window))) == 'table' then
    redis.call('DEL', key)  -- another algorithm's key: absent for this one
  end
  local count = redis.call('ZCARD', key)
  local newest = nil
  if count > 0 then newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) end

  local allowed = count + cost <= limit
  local size = count
  local retry_after = 0
  if allowed then
    if cost > 0 then
      size = count + cost
      if newest == nil or now > newest then newest = now end
    end
  else
    local expiring = count + cost - limit
    local entry = redis.call('ZRANGE', key, str(expiring - 1), str(expiring - 1), 'WITHSCORES')
    retry_after = tonumber(entry[2]) + window - now
  end
  local remaining = limit - size
  local expires_at = size > 0 and newest + window or 0
  local reset_after = size > 0 and expires_at - now or 0

  local store
  if allowed and cost > 0 then
    store = function()
      local at = str(now)
      local k = redis.call('ZCOUNT', key, at, at)
      local added = 0
      while added < cost do
        local args = {}
        for _ = 1, math.min(ZADD_BATCH, cost - added) do
          args[#args + 1] = at
          args[#args + 1] = log_member(at, k + added)
          added = added + 1
        end
        redis.call('ZADD', key, unpack(args))
      end
      expire(key, expires_at)
    end
  end
  return {allowed and 1 or 0, limit, remaining, retry_after, reset_after}, store
end
