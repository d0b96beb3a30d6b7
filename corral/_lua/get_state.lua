-- get_state: where a job is, read in one atomic step (BullMQ's getState). Writes nothing.
--
-- Checks in BullMQ's order: completed, failed, delayed, active, wait, prioritized,
-- waiting-children. A job found in none (or missing) is "unknown".
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, paused,
--       active, prioritized, delayed, waiting-children, completed, failed.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- Returns the state name (corral.job.JobState values).
-- Error codes: none.
-- @include keys

local job_id = ARGV[2]
if rcall("ZSCORE", K_COMPLETED, job_id) then
  return "completed"
end
if rcall("ZSCORE", K_FAILED, job_id) then
  return "failed"
end
if rcall("ZSCORE", K_DELAYED, job_id) then
  return "delayed"
end
if rcall("LPOS", K_ACTIVE, job_id) then
  return "active"
end
-- K:paused only holds ids in data written by BullMQ < 5; a job there is waiting too.
if rcall("LPOS", K_WAIT, job_id) or rcall("LPOS", K_PAUSED, job_id) then
  return "waiting"
end
if rcall("ZSCORE", K_PRIORITIZED, job_id) then
  return "prioritized"
end
if rcall("ZSCORE", K_WAITING_CHILDREN, job_id) then
  return "waiting-children"
end
return "unknown"
