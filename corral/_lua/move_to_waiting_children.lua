-- move_to_waiting_children: an active job waits for the children it added while it ran
-- (BullMQ's moveToWaitingChildren); the processor then raises WaitingChildrenError.
--
-- The attempt is not finished (atm is left alone): the job is released to wait when its last
-- pending child finishes (include/parent.lua), and a worker runs it again from the start.
-- When no child is pending, nothing changes and the caller goes on processing.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses active,
--       waiting-children, events, meta, stalled.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] lock token ("0" skips the lock check)
-- ARGV[4] now (epoch ms): its score in waiting-children
-- Returns 1 when the job moved to waiting-children, 0 when no child is pending.
-- Error codes: -1 job missing, -2 lock missing, -6 lock held by another token, -3 job not
-- in active.
-- @include keys
-- @include events
-- @include lock

local job_id = ARGV[2]
local job_key = ARGV[1] .. job_id
if rcall("EXISTS", job_key) == 0 then
  return -1
end
if ARGV[3] ~= "0" then
  local holder = rcall("GET", job_key .. ":lock")
  if not holder then
    return -2
  end
  if holder ~= ARGV[3] then
    return -6
  end
end
if not rcall("LPOS", K_ACTIVE, job_id) then
  return -3
end
if rcall("SCARD", job_key .. ":dependencies") == 0 then
  return 0
end
release_active(job_key, job_id, ARGV[3])
rcall("ZADD", K_WAITING_CHILDREN, ARGV[4], job_id)
emit(events_max_len(), "waiting-children", "jobId", job_id, "prev", "active")
return 1
