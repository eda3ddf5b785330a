-- A floor for Redis CPU per decision, not a limiter: the least a batched GCRA can do in Lua.
-- One call decides every key in KEYS (cost 1 each): TIME once, one MGET, one SET ... PXAT
-- per admitted key; no argument checks, no remaining/retry-after in the reply.
-- Times in milliseconds (integers below 2^53 that Lua's number-to-string keeps exact).
-- ARGV[1]: emission interval (ms per unit), ARGV[2]: tolerance (ms of burst beyond one unit).
-- Reply: one integer per key, 1 admitted, 0 denied.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tats = redis.call('MGET', unpack(KEYS))
local out = {}
for i = 1, #KEYS do
  local tat = tonumber(tats[i]) or now
  if tat < now then tat = now end
  if tat - now <= tolerance then
    local new = tat + interval
    redis.call('SET', KEYS[i], new, 'PXAT', new)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
