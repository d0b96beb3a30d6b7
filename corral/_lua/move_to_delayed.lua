-- move_to_delayed: a worker parks its active job until an absolute time (step jobs).
--
-- The attempt is not counted as finished (atm is left alone): the job comes back as the same
-- attempt's next step. The processor then raises DelayedError so the worker leaves it be.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses active, delayed,
--       marker, events, meta, stalled.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] lock token ("0" skips the lock check)
-- ARGV[4] now (epoch ms)
-- ARGV[5] runAt: when the job is due again (epoch ms)
-- Returns the delay stored in the hash: max(0, runAt - now).
-- Error codes: -1 job missing, -2 lock missing, -6 lock held by another token, -3 job not
-- in active.
-- @include keys
-- @include events
-- @include scores
-- @include lock

local job_id = ARGV[2]
local job_key = ARGV[1] .. job_id
local code = release_active(job_key, job_id, ARGV[3])
if code < 0 then
  return code
end
local run_at = tonumber(ARGV[5])
local delay = math.max(0, run_at - tonumber(ARGV[4]))
rcall("HSET", job_key, "delay", fmt(delay))
schedule_delayed(job_id, run_at, events_max_len())
return delay
