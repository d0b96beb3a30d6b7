-- update_progress: store a job's progress and tell listeners (BullMQ's updateProgress).
--
-- The value is copied into the events stream, so its size is bounded (the caller's limit,
-- checked here too). Everything that can refuse the call is checked before the first write.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses events, meta.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] progress JSON
-- ARGV[4] the most bytes ARGV[3] may have (absent: no limit)
-- Returns 0.
-- Error codes: -1 job missing, {-10, limit} the progress is over ARGV[4] bytes (nothing was
-- written).
-- @include keys
-- @include events

local job_id = ARGV[2]
local job_key = ARGV[1] .. job_id
if rcall("EXISTS", job_key) == 0 then
  return -1
end
local limit = tonumber(ARGV[4])
if limit and #ARGV[3] > limit then
  return {-10, limit}
end
-- The event first: XADD is the command that could still refuse (events_max_len bounds the
-- stored cap), and a refused call must not have stored the progress.
emit(events_max_len(), "progress", "jobId", job_id, "data", ARGV[3])
rcall("HSET", job_key, "progress", ARGV[3])
return 0
