-- check_stalled: recover the active jobs of dead workers, and say when to look again.
--
-- A job is stalled when it is active and its lock is gone: every fetch sets the lock in the
-- same call that moves the job to active (corral's and BullMQ 6.x's), and every finish deletes
-- it in the same call that moves the job out, so an active job without a lock is one whose
-- worker stopped renewing it. One pass is enough, so a dead worker's job comes back as soon as
-- its lock expires rather than one more check later. K:stalled is still refilled with the
-- active jobs, for BullMQ workers' own two-pass checks on the same queue.
-- K:stalled-check throttles the check for the whole queue (whoever gets there first, corral
-- or Node); corral sets it to expire when the earliest lock does (at most the interval), so
-- the next check runs when there can be something to recover.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, active,
--       prioritized, pc, marker, events, meta, stalled, stalled-check.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] now (epoch ms)
-- ARGV[3] stalled interval ms: the longest time until the next check
-- Returns {wait_ms, id1, id2, ...}: the ids moved back to wait, and the ms until the next check
-- can find something (when another check ran within the interval: nothing recovered, and the
-- time left on its throttle).
-- Jobs recovered more than the workers' max stalled count are failed at their next fetch.
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores

local interval = tonumber(ARGV[3])
local throttled = rcall("PTTL", K_STALLED_CHECK)
if throttled > 0 then
  return {throttled}
end
local prefix = ARGV[1]
local max_len = events_max_len()
rcall("XTRIM", K_EVENTS, "MAXLEN", "~", max_len)

local out = {0}
local earliest = interval
local active = rcall("LRANGE", K_ACTIVE, 0, -1)
local alive = {}
for _, job_id in ipairs(active) do
  local job_key = prefix .. job_id
  local ttl = rcall("PTTL", job_key .. ":lock")
  if ttl == -2 then
    -- No lock: the worker is gone. LREM, as the job may be listed once only.
    if rcall("LREM", K_ACTIVE, 1, job_id) > 0 then
      rcall("HINCRBY", job_key, "stc", 1)
      local priority = tonumber(rcall("HGET", job_key, "priority")) or 0
      make_ready(job_id, priority, false, max_len, "active")
      emit(max_len, "stalled", "jobId", job_id)
      out[#out + 1] = job_id
    end
  else
    alive[#alive + 1] = job_id
    if ttl >= 0 and ttl < earliest then
      earliest = ttl
    end
  end
end

-- BullMQ's second pass: every job active now is a suspect until its lock is renewed.
rcall("DEL", K_STALLED)
for i = 1, #alive, 5000 do
  rcall("SADD", K_STALLED, unpack(alive, i, math.min(i + 4999, #alive)))
end

-- Look again just after the earliest lock can have expired (a few ms after, so that it has),
-- and never sooner than 10 ms: a lock about to expire is not worth a busy loop.
local wait_ms = math.max(10, math.min(interval, earliest + 5))
rcall("SET", K_STALLED_CHECK, ARGV[2], "PX", wait_ms)
out[1] = wait_ms
return out
