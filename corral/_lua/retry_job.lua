-- retry_job: send a failed (or completed) job back to wait/prioritized (BullMQ's retry).
--
-- The attempt counters and the stacktrace are kept unless the caller resets the counters,
-- so attempts/backoff go on counting from where the job stopped. A cancel request
-- (`x-cancel`, cancel_job.lua) goes: the retried job starts clean, and a worker must not
-- fail it at fetch for a cancel of its earlier run.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, prioritized,
--       pc, completed, failed, marker, events, meta.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] the state it must be in: "failed" or "completed"
-- ARGV[4] "1" to reset atm (attempts made) to 0, else "0"
-- ARGV[5] "1" to reset ats (attempts started) to 0, else "0"
-- Returns 0.
-- Error codes: -1 job missing, -5 job locked by a worker, -4 job not in that state.
-- @include keys
-- @include events
-- @include scores

local job_id = ARGV[2]
local job_key = ARGV[1] .. job_id
local state = ARGV[3]
if rcall("EXISTS", job_key) == 0 then
  return -1
end
if rcall("EXISTS", job_key .. ":lock") == 1 then
  return -5
end
local set_key = K_FAILED
if state == "completed" then
  set_key = K_COMPLETED
end
if rcall("ZREM", set_key, job_id) == 0 then
  return -4
end
rcall("HDEL", job_key, "finishedOn", "processedOn", "failedReason", "returnvalue",
  "x-cancel")
if ARGV[4] == "1" then
  rcall("HSET", job_key, "atm", 0)
end
if ARGV[5] == "1" then
  rcall("HSET", job_key, "ats", 0)
end
-- TODO(flows): a retried child of a flow does not re-enter its parent's :dependencies yet.
local priority = tonumber(rcall("HGET", job_key, "priority")) or 0
make_ready(job_id, priority, false, events_max_len(), state)
return 0
