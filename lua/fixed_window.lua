-- Fixed window, line by line as src/algorithms/fixed_window.cpp. The key is a string
-- "<window start µs>:<count>" that expires when the window ends.
local function fixed_window(key, limit, window, cost, now)
  local value, exists = read_string(key)
  local t, current = 0, 0
  if value then
    local a, b = string.match(value, '^(%d+):(%d+)$')
    if a then t, current = tonumber(a), tonumber(b) end
  end

  -- Windows are aligned at multiples of the window length. A clock that goes backwards
  -- keeps counting in the later window it has already seen.
  local aligned = cdiv(now, window) * window
  if t < aligned then
    t = aligned
    current = 0
  end
  local window_end = t + window

  local allowed = current + cost <= limit
  local retry_after = 0
  if allowed then
    current = current + cost
  else
    retry_after = window_end - now
  end
  local remaining = math.max(0, limit - current)
  local reset_after = current > 0 and window_end - now or 0
  local expires_at = current > 0 and window_end or 0

  local store
  if allowed and cost > 0 then
    store = function() write_string(key, str(t) .. ':' .. str(current), expiry(expires_at)) end
  elseif expires_at == 0 and exists then
    store = function() delete_string(key) end
  end
  return {allowed and 1 or 0, limit, remaining, retry_after, reset_after}, store
end
