-- move_to_active: promote due delayed jobs, then take up to N ready jobs for one worker.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, active,
--       prioritized, pc, delayed, marker, events, meta.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] now (epoch ms)
-- ARGV[3..10] the fetch: how many jobs at most (the worker's free slots), lock token base
--         (job i gets "<base>:<ARGV[5] + i>"), first token sequence number, lock duration ms,
--         worker name for `pb` or "", max stalled count, limiter max (0: none), limiter
--         duration ms -- as corral._scripts.FetchNext.args() lays them out
-- ARGV[11] (metrics: not used here)
-- ARGV[12] the worker's dead-letter queue, or "" (or absent): where a job failed here for
--          good goes when its opts name none (include/dead_letter.lua)
-- Returns {wake, taken, id1, token1, fields1, id2, ...}; fields are HGETALL's flat list. When
-- nothing is taken, wake < 0 means rate limited for -wake ms, wake > 0 is the epoch ms when
-- the earliest delayed job is due, 0 means nothing is scheduled.
-- Nothing is taken while the queue is paused, at its global concurrency, or rate limited.
-- Jobs over the max stalled count, and flow parents marked to fail by a failParentOnFailure
-- child (`defa`), are failed here, not returned (their own parents are told, and removeOnFail
-- applies).
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores
-- @include remove
-- @include parent
-- @include dedup
-- @include dead_letter
-- @include parked
-- @include fetch

local prefix = ARGV[1]
local now = tonumber(ARGV[2])
dead_letter_default = ARGV[12] or ""
local max_len = events_max_len()
promote_delayed(prefix, now, max_len)
local out = {0, 0}
local taken, limit_ttl = take_jobs(out, prefix, now, fetch_spec(3), max_len)
out[2] = taken
if taken == 0 then
  out[1] = wake_hint(limit_ttl, prefix, now)
end
return out
