-- signal_job: store a named signal for a job and wake the job if it is parked waiting for it
-- (queue.signal, corral signal).
--
-- The payload is kept in the job's signals hash whatever the job is doing, so a signal sent
-- before the processor reaches its wait is not lost: park_job.lua finds it there. A job parked
-- for this name (x-wait, parked: include/parked.lua) is made due now, so that a corral
-- worker's next fetch takes it and runs it again (a `signaled` event says so); its wait then
-- returns the payload. A second signal of
-- the same name replaces the first. A finished job takes no signal: nothing is written.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, prioritized,
--       completed, failed, marker, events, meta; and K:x-parked, named from ARGV[1].
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] signal name
-- ARGV[4] payload (JSON text)
-- ARGV[5] now (epoch ms)
-- Returns {1, ""}: stored and the job woken; {0, ""}: stored, the job is not parked for it.
-- Error codes: {-1, ""} job missing; {-9, state} the job is "completed" or "failed".
-- @include keys
-- @include events
-- @include scores
-- @include parked

local job_id = ARGV[2]
local job_key = ARGV[1] .. job_id
local name = ARGV[3]
if rcall("EXISTS", job_key) == 0 then
  return {-1, ""}
end
if rcall("ZSCORE", K_COMPLETED, job_id) then
  return {-9, "completed"}
end
if rcall("ZSCORE", K_FAILED, job_id) then
  return {-9, "failed"}
end
-- The signals hash is corral._keys.QueueKeys.signals(job_id).
rcall("HSET", job_key .. ":x-signals", name, ARGV[4])
local now = tonumber(ARGV[5])
if rcall("HGET", job_key, "x-wait") ~= name or not wake_parked(ARGV[1], job_id, now) then
  return {0, ""}
end
emit(events_max_len(), "signaled", "jobId", job_id, "name", name)
return {1, ""}
