-- move_to_wait: a worker hands its active job back to wait/prioritized, unfinished (used
-- after a rate limit, or by step jobs). The processor then raises WaitingError.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, active,
--       prioritized, pc, marker, events, meta, stalled, limiter.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] lock token ("0" skips the lock check)
-- Returns the rate limiter's remaining ms (PTTL of K:limiter, 0 when not limited), as
-- BullMQ's moveToWait does, so the caller knows how long workers will hold off.
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
local priority = tonumber(rcall("HGET", job_key, "priority")) or 0
make_ready(job_id, priority, false, events_max_len(), "active")
local ttl = rcall("PTTL", K_LIMITER)
if ttl < 0 then
  return 0
end
return ttl
