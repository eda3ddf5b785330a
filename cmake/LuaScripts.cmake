# The embedded Redis scripts and the lua/*.lua parts each is assembled from, in order:
# lua/prelude.lua, the algorithm(s), the entry part, then the call of the entry. Included by
# EmbedLua.cmake (the build's outputs) and EmbedLuaScript.cmake (the assembly).
set(scripts token_bucket sliding_window_log sliding_window_counter fixed_window multi batch multi_at multi_delay refund lease
  reset reserve settle renew table_read table_write)
# The algorithms, numbered as enum algorithms::Algorithm (concurrency, 4, has no script of its
# own: its slot is taken by "reserve").
set(number 0)
foreach(algorithm token_bucket sliding_window_log sliding_window_counter fixed_window)
  set(parts_${algorithm} prelude ${algorithm} single)
  set(call_${algorithm} "return run_single(${algorithm}, ${number})")
  math(EXPR number "${number} + 1")
endforeach()
set(all_algorithms token_bucket sliding_window_log sliding_window_counter fixed_window concurrency)
# Several limits of one identity, all-or-nothing.
set(parts_multi prelude ${all_algorithms} multi)
set(call_multi "return run_multi()")
# Independent checks coalesced into one call (RedisStore).
set(parts_batch prelude ${all_algorithms} multi batch)
set(call_batch "return run_batch()")
# Refunds across Redis Cluster slots (RedisClusterStore): "multi" that also reports the
# instant it decided at, and the refund of what such a check consumed.
set(parts_multi_at prelude ${all_algorithms} multi multi_at)
set(call_multi_at "return run_multi_at()")
# A check whose keys may wait for their turn (on_limit: delay): "multi" with a max_delay per key.
set(parts_multi_delay prelude ${all_algorithms} multi multi_delay)
set(call_multi_delay "return run_multi_delay()")
set(parts_refund prelude ${all_algorithms} refund)
set(call_refund "return run_refund()")
# The library of Redis Functions holding every script: each part once, in this order.
set(library_parts prelude ${all_algorithms} single multi batch multi_at multi_delay refund lease reset reservation table)
# A block of units of one key consumed at once (LeasingStore); its unused units go back
# through "refund".
set(parts_lease prelude token_bucket fixed_window lease)
set(call_lease "return run_lease()")
# The deletion of one identity's keys (Store::reset: the admin's reset).
set(parts_reset prelude reset)
set(call_reset "return run_reset()")
# The shared tables (Store::read_table, Store::write_table: the per-identity overrides).
set(parts_table_read prelude table)
set(call_table_read "return run_table_read()")
set(parts_table_write prelude table)
set(call_table_write "return run_table_write()")
# A check admitted at an estimated cost and its settlement to the actual cost (Store::reserve,
# Store::settle); the settlement gives back through "refund"'s functions.
set(parts_reserve prelude ${all_algorithms} multi refund reservation)
set(call_reserve "return run_reserve()")
set(parts_settle prelude ${all_algorithms} multi refund reservation)
set(call_settle "return run_settle()")
# A heartbeat of a reservation holding concurrency slots (Store::renew).
set(parts_renew prelude ${all_algorithms} multi refund reservation)
set(call_renew "return run_renew()")
