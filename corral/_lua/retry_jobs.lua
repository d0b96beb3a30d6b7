-- retry_jobs: send a batch of failed (or completed) jobs back to wait/prioritized, oldest
-- first, each as retry_job.lua does it (BullMQ's retryJobs).
--
-- finishedOn, processedOn, failedReason, returnvalue and a cancel request (`x-cancel`) go;
-- the attempt counters and the stacktrace stay. Only jobs finished at or before a timestamp
-- are taken, so jobs that fail again while the caller loops are not retried a second time.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, prioritized,
--       pc, completed, failed, marker, events, meta.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] "failed" or "completed"
-- ARGV[3] at most this many jobs are moved by this call (1000 at most, whatever is asked: one
--         call must not hold the server for long)
-- ARGV[4] only jobs finished at or before this epoch ms
-- Returns how many jobs were moved (fewer than ARGV[3]: none is left).
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores

local prefix = ARGV[1]
local state = ARGV[2]
local set_key = K_FAILED
if state == "completed" then
  set_key = K_COMPLETED
end
local count = math.min(tonumber(ARGV[3]), 1000)
local ids = rcall("ZRANGEBYSCORE", set_key, "-inf", ARGV[4], "LIMIT", 0, count)
if #ids == 0 then
  return 0
end
rcall("ZREM", set_key, unpack(ids))
local max_len = events_max_len()
for _, job_id in ipairs(ids) do
  local job_key = prefix .. job_id
  -- An id whose hash is gone is only dropped from the set.
  if rcall("EXISTS", job_key) == 1 then
    rcall("HDEL", job_key, "finishedOn", "processedOn", "failedReason", "returnvalue",
      "x-cancel")
    local priority = tonumber(rcall("HGET", job_key, "priority")) or 0
    make_ready(job_id, priority, false, max_len, state)
  end
end
return #ids
