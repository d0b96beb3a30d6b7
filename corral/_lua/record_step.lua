-- record_step: keep the result of a processor's step the first time it is done (job.step).
--
-- The first result recorded wins (HSETNX): a processor run twice at once (its lock lost to a
-- stall) gets one result for both. A job that is gone gets no orphan steps hash.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses none.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] step name
-- ARGV[4] result (JSON text)
-- Returns {0, result}: the result recorded for the step (this one, or an earlier one).
-- Error codes: {-1} job missing.
-- @include keys

local job_key = ARGV[1] .. ARGV[2]
if rcall("EXISTS", job_key) == 0 then
  return {-1}
end
-- The steps hash is corral._keys.QueueKeys.steps(job_id).
local steps_key = job_key .. ":x-steps"
rcall("HSETNX", steps_key, ARGV[3], ARGV[4])
return {0, rcall("HGET", steps_key, ARGV[3])}
