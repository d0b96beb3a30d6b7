-- update_progress: store a job's progress and tell listeners (BullMQ's updateProgress).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses events, meta.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] progress JSON
-- Returns 0.
-- Error codes: -1 job missing.
-- @include keys
-- @include events

local job_id = ARGV[2]
local job_key = ARGV[1] .. job_id
if rcall("EXISTS", job_key) == 0 then
  return -1
end
rcall("HSET", job_key, "progress", ARGV[3])
emit(events_max_len(), "progress", "jobId", job_id, "data", ARGV[3])
return 0
