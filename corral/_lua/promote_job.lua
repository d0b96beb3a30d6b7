-- promote_job: run a delayed job now: delayed -> wait or prioritized (BullMQ's promote).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, prioritized,
--       pc, delayed, marker, events, meta.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- Returns 0.
-- Error codes: -1 job missing, -4 job not delayed.
-- @include keys
-- @include events
-- @include scores

local job_id = ARGV[2]
local job_key = ARGV[1] .. job_id
if rcall("EXISTS", job_key) == 0 then
  return -1
end
if rcall("ZREM", K_DELAYED, job_id) == 0 then
  return -4
end
-- Same placement as the fetch's promotion of due jobs (include/fetch.lua promote_delayed).
local priority = tonumber(rcall("HGET", job_key, "priority")) or 0
rcall("HSET", job_key, "delay", 0)
make_ready(job_id, priority, false, events_max_len(), "delayed")
return 0
