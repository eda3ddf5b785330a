-- Entries of the shared tables (Store::read_table, Store::write_table): a small hash of
-- settings every instance reads (the per-identity overrides), under KEYS[1]. Its field ''
-- holds the table's version, which every change moves past both the previous version and
-- the server's clock (µs), so that a table deleted and written again never answers an old
-- version; the other fields are the entries.

local function table_version(key)
  return redis_call('HGET', key, '') or '0'
end

-- ARGV = {known version}. Reply: {version} when it is still `known`, else {version, field,
-- value, field, value...} (the entries, in no order).
local function run_table_read()
  if #KEYS ~= 1 or #ARGV ~= 1 then fail('expected 1 key and the known version') end
  local version = table_version(KEYS[1])
  if version == ARGV[1] then return {version} end
  local out = {version}
  local all = redis_call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if all[i] ~= '' then
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
    end
  end
  return out
end

-- ARGV = {max entries, field, [value]}: the entry set to `value`, or removed without one.
-- Reply: {version, existed 1/0}; a table holding `max entries` refuses a new one.
local function run_table_write()
  if #KEYS ~= 1 or (#ARGV ~= 2 and #ARGV ~= 3) then fail('expected 1 key, the most entries, a field and a value') end
  local max_entries = integer_arg(ARGV[1], 'max entries')
  local field = ARGV[2]
  if field == '' then fail('an entry needs a name') end
  local key = KEYS[1]
  local existed = redis_call('HEXISTS', key, field) == 1
  if #ARGV == 3 then
    -- HLEN counts the version's field too.
    if not existed and redis_call('HLEN', key) > max_entries then
      fail('the table holds ' .. str(max_entries) .. ' entries: remove one first')
    end
    redis_call('HSET', key, field, ARGV[3])
  elseif existed then
    redis_call('HDEL', key, field)
    if redis_call('HLEN', key) <= 1 then
      -- Emptied: the version goes with it (0), and the next write moves past the clock.
      redis_call('DEL', key)
      return {'0', 1}
    end
  else
    return {table_version(key), 0}
  end
  local t = redis_call('TIME')
  local now = to_number(t[1]) * 1000000 + to_number(t[2])
  local version = math.max(to_number(table_version(key)) + 1, now)
  local text = format('%.0f', version)
  redis_call('HSET', key, '', text)
  return {text, existed and 1 or 0}
end
