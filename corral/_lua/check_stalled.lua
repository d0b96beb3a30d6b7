-- check_stalled: recover jobs whose worker died (BullMQ's two-pass stalled check).
--
-- A job is stalled when it was active at the previous check and its lock has expired since:
-- renewing a lock takes the job out of K:stalled, so only jobs nobody renewed stay there.
-- The check runs at most once per interval for the whole queue (K:stalled-check), whichever
-- worker (corral or Node) gets there first.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, active,
--       prioritized, pc, marker, events, meta, stalled, stalled-check.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] now (epoch ms)
-- ARGV[3] stalled interval ms (the throttle's lifetime)
-- Returns the ids moved back to wait; {} also when another check ran within the interval.
-- Jobs recovered more than the workers' max stalled count are failed at their next fetch.
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores

if rcall("SET", K_STALLED_CHECK, ARGV[2], "PX", ARGV[3], "NX") == false then
  return {}
end
local prefix = ARGV[1]
local max_len = events_max_len()
rcall("XTRIM", K_EVENTS, "MAXLEN", "~", max_len)

local recovered = {}
for _, job_id in ipairs(rcall("SMEMBERS", K_STALLED)) do
  local job_key = prefix .. job_id
  if rcall("EXISTS", job_key .. ":lock") == 0 and rcall("LREM", K_ACTIVE, 1, job_id) > 0 then
    rcall("HINCRBY", job_key, "stc", 1)
    local priority = tonumber(rcall("HGET", job_key, "priority")) or 0
    make_ready(job_id, priority, false, max_len, "active")
    emit(max_len, "stalled", "jobId", job_id)
    recovered[#recovered + 1] = job_id
  end
end

-- Second pass of the next check: every job active now is a suspect until its lock is renewed.
rcall("DEL", K_STALLED)
local active = rcall("LRANGE", K_ACTIVE, 0, -1)
for i = 1, #active, 5000 do
  rcall("SADD", K_STALLED, unpack(active, i, math.min(i + 4999, #active)))
end
return recovered
