-- Entry of "multi_delay": "multi" where each key also has a max_delay, so that a check that
-- would be denied now can wait for its turn (algorithms::step_all with max_delays). KEYS =
-- k1..kN; ARGV = {now_us, then per key: algorithm, capacity, period_us, cost, max_delay_us}.
-- Returns the reply of "multi" (for the decisions told from `now`), then the delay in µs
-- after which the admitted request is to be passed on (0: at once, or denied).
local function run_multi_delay()
  local n = #KEYS
  if #ARGV ~= 1 + 5 * n then
    fail('expected now_us, then algorithm, capacity, period_us, cost, max_delay_us per key')
  end
  local limits = parse_limits(1, n, 2, 5)
  for i = 1, n do
    local max_delay = integer_arg(ARGV[2 + 5 * (i - 1) + 4], 'max_delay')
    if max_delay < 0 or max_delay > MAX_DELAY then
      fail('max_delay must be between 0 and ' .. str(MAX_DELAY) .. ' microseconds, got ' .. str(max_delay))
    end
    limits[i].max_delay = max_delay
  end
  limits.delays = true
  local out, delay = check_all(limits, resolve_now(ARGV[1]))
  out[#out + 1] = delay
  return out
end
