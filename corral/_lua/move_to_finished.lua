-- move_to_finished: end one attempt of an active job (completed, failed, or retry), then
-- optionally take the worker's next jobs in the same call (fetch-next).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, active,
--       prioritized, pc, delayed, completed, failed, marker, events, meta, stalled.
-- ARGV[1]  key prefix of the queue's jobs ("bull:q:")
-- ARGV[2]  job id                 ARGV[3]  lock token ("0" skips the lock check)
-- ARGV[4]  now (epoch ms)
-- ARGV[5]  outcome: "completed", "failed" (final) or "retry" (failed, more attempts left)
-- ARGV[6]  returnvalue JSON (completed) or failedReason (failed, retry)
-- ARGV[7]  the whole new stacktrace JSON array (failed, retry), or ""
-- ARGV[8]  retention, keep count: -1 keep all, 0 remove now, n keep the newest n
-- ARGV[9]  retention, max age ms: -1 none
-- ARGV[10] retry delay ms (retry only): > 0 goes to delayed, 0 straight back to wait
-- ARGV[11..18] fetch next, as in move_to_active.lua's ARGV[3..10] (count 0: none)
-- ARGV[19] metrics: data points to keep per minute series (0: no metrics), BullMQ's
--          maxDataPoints
-- A finished job (completed, or failed for good) frees its deduplication id, starts the add
-- kept by keep-last-if-active, and records its outcome for its idempotency key
-- (include/dedup.lua).
-- A flow child (a job with `parentKey`) also updates its parent, which may be in another
-- queue (include/parent.lua): completed -> no longer pending, return value in the parent's
-- :processed; failed for good -> by its failure policy (fpof, cpof, idof, rdof or none). A
-- parent left with no pending child is released to wait/prioritized/delayed with an event on
-- its own queue; this happens before the child's own `completed`/`failed` event, as BullMQ
-- writes them. A retry leaves the parent alone.
-- Returns {0, attempts_made, wake, taken, id1, token1, fields1, ...}, wake as in
-- move_to_active.lua
-- Error codes (first element): -1 job missing, -2 lock missing, -6 lock held by another
-- token, -3 job not in active.
-- @include keys
-- @include events
-- @include scores
-- @include remove
-- @include parent
-- @include dedup
-- @include fetch

local prefix = ARGV[1]
local job_id = ARGV[2]
local job_key = prefix .. job_id
local now = tonumber(ARGV[4])
local outcome = ARGV[5]

if rcall("EXISTS", job_key) == 0 then
  return {-1}
end
local lock_key = job_key .. ":lock"
if ARGV[3] ~= "0" then
  -- The token check is what stops a worker that lost its lock from overwriting the job.
  local holder = rcall("GET", lock_key)
  if not holder then
    return {-2}
  end
  if holder ~= ARGV[3] then
    return {-6}
  end
end
if rcall("LREM", K_ACTIVE, -1, job_id) == 0 then
  return {-3}
end
rcall("DEL", lock_key)
rcall("SREM", K_STALLED, job_id)

local max_len = events_max_len()
local attempts_made = rcall("HINCRBY", job_key, "atm", 1)

local parent_key = rcall("HGET", job_key, "parentKey")

local metrics_points = tonumber(ARGV[19]) or 0
if outcome == "completed" then
  rcall("HSET", job_key, "returnvalue", ARGV[6], "finishedOn", now)
  rcall("ZADD", K_COMPLETED, now, job_id)
  if parent_key then
    child_completed(job_key, parent_key, ARGV[6], now)
  end
  release_dedup(prefix, job_key, job_id, now, max_len)
  record_outcome(prefix, job_key, "completed", ARGV[6], now)
  if metrics_points > 0 then
    record_metrics(prefix, "completed", now, metrics_points)
  end
  emit(max_len, "completed", "jobId", job_id, "returnvalue", ARGV[6], "prev", "active")
  apply_retention(K_COMPLETED, prefix, job_id, tonumber(ARGV[8]), tonumber(ARGV[9]), now)
elseif outcome == "failed" then
  rcall("HSET", job_key, "failedReason", ARGV[6], "finishedOn", now)
  if ARGV[7] ~= "" then
    rcall("HSET", job_key, "stacktrace", ARGV[7])
  end
  rcall("HDEL", job_key, "defa")
  rcall("ZADD", K_FAILED, now, job_id)
  if parent_key then
    child_failed(job_key, parent_key, ARGV[6], now)
  end
  release_dedup(prefix, job_key, job_id, now, max_len)
  record_outcome(prefix, job_key, "failed", ARGV[6], now)
  if metrics_points > 0 then
    record_metrics(prefix, "failed", now, metrics_points)
  end
  emit(max_len, "failed", "jobId", job_id, "failedReason", ARGV[6], "prev", "active")
  emit(max_len, "retries-exhausted", "jobId", job_id, "attemptsMade", attempts_made)
  apply_retention(K_FAILED, prefix, job_id, tonumber(ARGV[8]), tonumber(ARGV[9]), now)
else
  rcall("HSET", job_key, "failedReason", ARGV[6])
  if ARGV[7] ~= "" then
    rcall("HSET", job_key, "stacktrace", ARGV[7])
  end
  local retry_delay = tonumber(ARGV[10])
  if retry_delay > 0 then
    rcall("HSET", job_key, "delay", retry_delay)
    schedule_delayed(job_id, now + retry_delay, max_len)
  else
    local priority = tonumber(rcall("HGET", job_key, "priority")) or 0
    make_ready(job_id, priority, false, max_len, "active")
  end
end

local out = {0, attempts_made, 0, 0}
local spec = fetch_spec(11)
if spec.count > 0 then
  promote_delayed(prefix, now, max_len)
  local taken, limit_ttl = take_jobs(out, prefix, now, spec, max_len)
  out[4] = taken
  if taken == 0 then
    out[3] = wake_hint(limit_ttl)
    if rcall("LLEN", K_WAIT) == 0 and rcall("ZCARD", K_PRIORITIZED) == 0 then
      emit(max_len, "drained")
    end
  end
end
return out
