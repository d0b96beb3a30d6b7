-- change_priority: set a job's priority; a ready job is re-queued under it at once.
--
-- A job in wait or prioritized leaves it and is pushed again (a new pc counter, so it goes
-- behind the jobs already queued at that priority; priority 0 goes to wait). In any other
-- state only the hash changes, and the new priority applies when the job becomes ready.
-- opts is left alone, as BullMQ leaves it.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, prioritized,
--       pc, marker, meta.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] priority (0..2097151)
-- ARGV[4] "1" for lifo (only used when the new priority is 0), else "0"
-- Returns 1 when the job was re-queued, 0 when only the hash changed.
-- Error codes: -1 job missing.
-- @include keys
-- @include scores

local job_id = ARGV[2]
local job_key = ARGV[1] .. job_id
if rcall("EXISTS", job_key) == 0 then
  return -1
end
local priority = tonumber(ARGV[3])
rcall("HSET", job_key, "priority", ARGV[3])
if rcall("LREM", K_WAIT, 0, job_id) + rcall("ZREM", K_PRIORITIZED, job_id) == 0 then
  return 0
end
push_ready(job_id, priority, ARGV[4] == "1")
if not is_paused() then
  rcall("ZADD", K_MARKER, 0, "0")
end
return 1
