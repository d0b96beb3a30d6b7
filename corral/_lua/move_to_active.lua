-- move_to_active: promote due delayed jobs, then take up to N ready jobs for one worker.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, active,
--       prioritized, pc, delayed, marker, events, meta.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] now (epoch ms)
-- ARGV[3] how many jobs to take at most (the worker's free slots)
-- ARGV[4] lock token base (the worker's uuid); job i gets "<base>:<ARGV[5] + i>"
-- ARGV[5] first token sequence number
-- ARGV[6] lock duration ms
-- ARGV[7] worker name for `pb`, or ""
-- Returns {next_delayed_at, taken, id1, token1, fields1, id2, ...}: next_delayed_at is the
-- epoch ms when the earliest delayed job is due (0: none); fields are HGETALL's flat list.
-- Nothing is taken while the queue is paused or at its global concurrency.
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores
-- @include fetch

local prefix = ARGV[1]
local now = tonumber(ARGV[2])
local max_len = events_max_len()
promote_delayed(prefix, now, max_len)
local out = {0, 0}
local taken = take_jobs(out, prefix, now, tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]),
  ARGV[6], ARGV[7], max_len)
out[2] = taken
if taken == 0 then
  out[1] = next_delayed_at()
end
return out
