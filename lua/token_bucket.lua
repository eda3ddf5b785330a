-- Token bucket in GCRA form, line by line as src/algorithms/token_bucket.cpp. The key is a
-- string holding the theoretical arrival time `tat` in µs; it expires when the bucket is full.
local function token_bucket(key, capacity, interval, cost, now)
  local value, exists = read_string(key)
  local stored = value and string.match(value, '^%d+$') and tonumber(value) or 0
  local tau = capacity * interval
  local tat = math.max(stored, now)
  local new_tat = tat + cost * interval
  local t = stored

  local allowed, remaining, retry_after, reset_after
  if new_tat - now <= tau then
    allowed = true
    remaining = cdiv(tau - (new_tat - now), interval)
    retry_after = 0
    reset_after = new_tat - now
    if cost > 0 then t = new_tat end
  else
    allowed = false
    remaining = cdiv(math.max(0, tau - (tat - now)), interval)
    retry_after = new_tat - now - tau
    reset_after = tat - now
  end
  local expires_at = t > now and t or 0

  local store
  if allowed and cost > 0 then
    store = function() write_string(key, str(t), expiry(expires_at)) end
  elseif expires_at == 0 and exists then
    store = function() delete_string(key) end
  end
  return {allowed and 1 or 0, capacity, remaining, retry_after, reset_after}, store
end
