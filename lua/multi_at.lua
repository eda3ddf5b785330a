-- Entry of "multi_at": "multi" (same KEYS and ARGV), its reply followed by the instant in µs
-- the check was decided at (the argument, or the server's TIME for -1). A later refund of
-- what it consumed (refund.lua) needs that instant.
local function run_multi_at()
  local out = run_multi()
  out[#out + 1] = clock.now
  return out
end
