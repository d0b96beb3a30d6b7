-- park_job: a processor waits for a named signal without holding its worker (job.wait_for_signal).
--
-- One script, so that a signal sent while the processor is on its way to the wait is seen
-- here and never missed: either the signal is already stored (its payload is returned and
-- nothing moves), or the job is parked and signal_job.lua, which runs after, wakes it.
-- Parking is move_to_delayed.lua's move (active -> delayed, lock released, atm left alone),
-- but out of any Node worker's reach (include/parked.lua), with the wait recorded on the job
-- hash: x-wait (the signal's name) and x-wait-due (when the wait times out, epoch ms). A job
-- that comes back still waiting for the same name and past x-wait-due has timed out; one that
-- comes back early (promoted by hand) is parked again until the same due time.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses active, delayed,
--       marker, events, meta, stalled; and K:x-parked, named from ARGV[1].
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] lock token ("0" skips the lock check)
-- ARGV[4] now (epoch ms)
-- ARGV[5] signal name
-- ARGV[6] due time of a new wait (epoch ms)
-- Returns {0, due}: parked until due; {1, payload}: the signal is there (JSON text);
-- {2, due}: the wait timed out (x-wait and x-wait-due are cleared, so a retry waits anew).
-- Error codes ({code}): -1 job missing, -2 lock missing, -6 lock held by another token,
-- -3 job not in active (nothing written for any of them).
-- @include keys
-- @include events
-- @include scores
-- @include parked

local job_id = ARGV[2]
local job_key = ARGV[1] .. job_id
local token = ARGV[3]
local now = tonumber(ARGV[4])
local name = ARGV[5]
if rcall("EXISTS", job_key) == 0 then
  return {-1}
end
if token ~= "0" then
  local holder = rcall("GET", job_key .. ":lock")
  if not holder then
    return {-2}
  end
  if holder ~= token then
    return {-6}
  end
end
local waiting = rcall("HMGET", job_key, "x-wait", "x-wait-due")
local same = waiting[1] == name
-- The signals hash is corral._keys.QueueKeys.signals(job_id).
local payload = rcall("HGET", job_key .. ":x-signals", name)
if payload then
  if same then
    rcall("HDEL", job_key, "x-wait", "x-wait-due")
  end
  return {1, payload}
end
local due = tonumber(ARGV[6])
if same and tonumber(waiting[2]) then
  due = tonumber(waiting[2])
  if due <= now then
    rcall("HDEL", job_key, "x-wait", "x-wait-due")
    return {2, fmt(due)}
  end
end
-- The lock was checked above (and nothing has run since): take the job out of active as
-- include/lock.lua's release_active does, with its own check that it is active.
if rcall("LREM", K_ACTIVE, -1, job_id) == 0 then
  return {-3}
end
rcall("DEL", job_key .. ":lock")
rcall("SREM", K_STALLED, job_id)
rcall("HSET", job_key, "x-wait", name, "x-wait-due", fmt(due),
  "delay", fmt(math.max(0, due - now)))
park(ARGV[1], job_id, due)
emit(events_max_len(), "delayed", "jobId", job_id, "delay", fmt(due))
return {0, fmt(due)}
