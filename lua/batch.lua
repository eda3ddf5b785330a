-- Entry of the batch script: independent checks coalesced into one call, run one after the
-- other at one instant, each all-or-nothing as multi.lua. KEYS = the keys of every check, in
-- order. ARGV = {now_us, the number of distinct limits L, then per limit: algorithm,
-- capacity, period_us, cost; then per entry either one limit number i (1..L: one key checked
-- once with limit i), or 0, its key count n, its repetitions r and n limit numbers}. An entry
-- with r > 1 stands for r identical checks issued one after the other. Each limit's
-- arguments are checked once, every argument before anything is read or written. Every key
-- is read at once (MGET; the read cache of the prelude).
--
-- The reply is one flat array of integers; per decision 4 of them: allowed (1/0), remaining,
-- retry_after, reset_after (the limit is the check's own capacity). Per entry, in order:
-- * one key once: its decision; a token bucket's in one integer, reset_after when admitted
--   and -1 - reset_after when denied (the other fields follow from it and the limit);
-- * a one-key token bucket entry with repetitions, in the closed form of
--   token_bucket_repeated: the number admitted, the first decision if any was admitted, the
--   denial if any was denied;
-- * otherwise: the number m of checks answered (up to and including the first denial: at
--   one instant a denied check changes nothing, so the identical checks after it get the
--   same reply), then per check the decisions of its n keys.
local function run_batch()
  local L = integer_arg(ARGV[2], 'limit count')
  if L < 1 or 2 + 4 * L > #ARGV then fail('limit count ' .. str(L) .. ' does not match the arguments') end
  local lsteps, lcap, lperiod, lcost = {}, {}, {}, {}
  for i = 1, L do
    local base = 4 * i - 1
    local algorithm = tonumber(ARGV[base])
    local step = STEPS[algorithm]
    if step == nil then fail('unknown algorithm ' .. tostring(ARGV[base])) end
    lsteps[i] = step
    lcap[i], lperiod[i], lcost[i] = limit_args(algorithm, ARGV[base + 1], ARGV[base + 2], ARGV[base + 3])
  end
  -- Entries: a one-key single check is its limit number; any other entry its repetitions and
  -- its limits (limits_of). Limit
  -- numbers are looked up by their text (no conversion per entry).
  local numbers = {}
  for i = 1, L do numbers[str(i)] = i end
  local entries = {}    -- per entry: its limit number (one key, once), or its repetitions
  local limits_of = {}  -- per entry of several keys or repetitions: its limits
  local first, arg, count = 1, 3 + 4 * L, 0
  local nargs, nkeys = #ARGV, #KEYS
  while arg <= nargs do
    count = count + 1
    local text = ARGV[arg]
    local i = numbers[text]
    if i then
      entries[count] = i
      first, arg = first + 1, arg + 1
    elseif text ~= '0' then
      fail('entry ' .. str(count) .. ': limit number ' .. text .. ' is not between 1 and ' .. str(L))
    else
      local n = integer_arg(ARGV[arg + 1], 'key count')
      local repeats = integer_arg(ARGV[arg + 2], 'repetitions')
      if n < 1 or repeats < 1 or first + n - 1 > nkeys or arg + 2 + n > nargs then
        fail('entry ' .. str(count) .. ': key count ' .. str(n) .. ' or repetitions ' .. str(repeats) ..
             ' do not match the keys and arguments')
      end
      local limits, seen = {}, {}
      for k = 1, n do
        local j = numbers[ARGV[arg + 2 + k]]
        if j == nil then
          fail('entry ' .. str(count) .. ': limit number ' .. ARGV[arg + 2 + k] .. ' is not between 1 and ' .. str(L))
        end
        local key = KEYS[first + k - 1]
        if seen[key] then fail("key '" .. key .. "' appears twice in one check") end
        seen[key] = true
        limits[k] = {key = key, step = lsteps[j], capacity = lcap[j], period = lperiod[j], cost = lcost[j],
                     max_delay = 0}
      end
      entries[count], limits_of[count] = repeats, limits
      first, arg = first + n, arg + 3 + n
    end
  end
  if count < 1 then fail('a batch holds at least one check') end
  if first - 1 ~= nkeys then fail('expected ' .. str(first - 1) .. ' keys, got ' .. str(nkeys)) end

  local now = resolve_now(ARGV[1])
  cache_strings(KEYS)
  local out, o = {}, 0
  local key_index = 1
  for c = 1, count do
    local entry = entries[c]
    if limits_of[c] == nil then
      -- One key, once: its step alone; a token bucket without a table or a closure.
      local key = KEYS[key_index]
      key_index = key_index + 1
      local step, capacity, period, cost = lsteps[entry], lcap[entry], lperiod[entry], lcost[entry]
      if step == token_bucket then
        -- One integer: reset_after when admitted, -1 - reset_after when denied (RedisStore
        -- derives the rest of the decision from it, as token_bucket::step would).
        local allowed, _, _, reset_after = token_bucket_now(key, capacity, period, cost, now)
        o = o + 1
        if allowed == 1 then out[o] = reset_after else out[o] = -1 - reset_after end
      else
        local decision, store = step(key, capacity, period, cost, now)
        if store then store() end
        out[o + 1], out[o + 2], out[o + 3], out[o + 4] = decision[1], decision[3], decision[4], decision[5]
        o = o + 4
      end
    else
      local limits, repeats = limits_of[c], entry
      local l = limits[1]
      key_index = key_index + #limits
      if #limits == 1 and l.step == token_bucket and repeats > 1 then
        -- The same decisions as the loop below, in closed form.
        local reply, store = token_bucket_repeated(l.key, l.capacity, l.period, l.cost, now, repeats)
        if store then store() end
        o = o + 1
        out[o] = reply[1]
        for j = 2, #reply do
          if j % 5 ~= 3 then  -- the decisions' limit fields (3, 8) are left out
            o = o + 1
            out[o] = reply[j]
          end
        end
      else
        local at = o + 1
        o = o + 1
        local answered = 0
        for _ = 1, repeats do
          local reply = check_all(limits, now)
          answered = answered + 1
          for k = 1, #limits do
            local b = 5 * k
            out[o + 1], out[o + 2], out[o + 3], out[o + 4] = reply[b + 1], reply[b + 3], reply[b + 4], reply[b + 5]
            o = o + 4
          end
          if reply[1] == 0 then break end
        end
        out[at] = answered
      end
    end
  end
  cache_strings(nil)
  return out
end
