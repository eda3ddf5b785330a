-- Entry of the reset script (Store::reset): deletes KEYS, the keys of one identity (one slot
-- of a cluster), so that their next check starts from full limits. ARGV: none. Reply: how
-- many of them existed.
local function run_reset()
  if #KEYS < 1 or #ARGV ~= 0 then fail('expected at least 1 key and no argument') end
  return redis_call('DEL', unpack(KEYS))
end
