-- Entry of the batch script: independent checks coalesced into one call, run one after the
-- other at one instant, each all-or-nothing as multi.lua. KEYS = the keys of every check, in
-- order; ARGV = {now_us, entries, then per entry: its key count n, its repetitions r, then per
-- key: algorithm, capacity, period_us, cost}. An entry with r > 1 stands for r identical
-- checks issued one after the other. Every argument is checked before anything is read or
-- written; string keys go through the write-back cache (prelude), so a hot key is read and
-- written once per call.
-- Returns per entry the replies of its checks, each the 5 integers of single.lua for a
-- one-key check or the reply of multi.lua otherwise, up to and including the first denial:
-- at one instant a denied check changes nothing, so the identical checks after it get the
-- same reply. A one-key token bucket entry with repetitions answers in the closed form of
-- token_bucket_repeated instead: a flat array {admitted, first decision, denial}.
local function run_batch()
  local count = integer_arg(ARGV[2], 'entries')
  if count < 1 then fail('a batch holds at least one check') end
  local entries = {}
  local first, arg = 1, 3
  for c = 1, count do
    local n = integer_arg(ARGV[arg], 'key count')
    local repeats = integer_arg(ARGV[arg + 1], 'repetitions')
    if n < 1 or repeats < 1 or first + n - 1 > #KEYS or arg + 1 + 4 * n > #ARGV then
      fail('entry ' .. str(c) .. ': key count ' .. str(n) .. ' or repetitions ' .. str(repeats) ..
           ' do not match the keys and arguments')
    end
    entries[c] = {limits = parse_limits(first, n, arg + 2), repeats = repeats}
    first = first + n
    arg = arg + 2 + 4 * n
  end
  if first - 1 ~= #KEYS or arg - 1 ~= #ARGV then
    fail('expected ' .. str(first - 1) .. ' keys and ' .. str(arg - 1) .. ' arguments')
  end
  local now = resolve_now(ARGV[1])
  -- The write-back cache pays off only when some key is stepped more than once.
  local seen, again = {}, false
  for _, key in ipairs(KEYS) do
    again = again or seen[key] ~= nil
    seen[key] = true
  end
  for _, entry in ipairs(entries) do
    again = again or (entry.repeats > 1 and not (#entry.limits == 1 and entry.limits[1].step == token_bucket))
  end
  if again then cache_strings() end
  local out = {}
  for c = 1, count do
    local entry = entries[c]
    local l = entry.limits[1]
    local replies
    if #entry.limits == 1 and l.step == token_bucket and entry.repeats > 1 then
      -- The same decisions as the loop below, in closed form.
      local store
      replies, store = token_bucket_repeated(l.key, l.capacity, l.period, l.cost, now, entry.repeats)
      if store then store() end
    elseif #entry.limits == 1 and entry.repeats == 1 then
      -- One key, once: its step alone (check_all would only copy its decision around).
      local decision, store = l.step(l.key, l.capacity, l.period, l.cost, now)
      if store then store() end
      replies = {decision}
    else
      replies = {}
      for r = 1, entry.repeats do
        local reply = check_all(entry.limits, now)
        if #entry.limits == 1 then reply = {reply[1], reply[2], reply[3], reply[4], reply[5]} end
        replies[r] = reply
        if reply[1] == 0 then break end
      end
    end
    out[c] = replies
  end
  flush_strings()
  return out
end
