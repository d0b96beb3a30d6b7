-- Ending one attempt of an active job: completed, failed for good, or retried.
-- Needs include/keys, events, scores, remove, parent, dedup, dead_letter.

-- Returns the job's attempts made after this one, or an error code: -1 job missing, -2 lock
-- missing, -6 lock held by another token, -3 job not in active. `token` "0" skips the lock
-- check. `keep`/`max_age` are the retention (-1: none), `retry_delay` is for "retry",
-- `metrics_points` the worker's metrics setting (0: none).
local function finish_job(prefix, job_id, token, now, outcome, value, stacktrace, keep, max_age,
    retry_delay, metrics_points, max_len)
  local job_key = prefix .. job_id
  -- One read for all the fields a finish needs; every job hash has a name, so a missing name
  -- is a missing job.
  local fields = rcall("HMGET", job_key, "name", "atm", "parentKey", "deid", "x-idem")
  if not fields[1] then
    return -1
  end
  local lock_key = job_key .. ":lock"
  if token ~= "0" then
    -- The token check is what stops a worker that lost its lock from overwriting the job.
    local holder = rcall("GET", lock_key)
    if not holder then
      return -2
    end
    if holder ~= token then
      return -6
    end
  end
  if rcall("LREM", K_ACTIVE, -1, job_id) == 0 then
    return -3
  end
  rcall("DEL", lock_key)
  rcall("SREM", K_STALLED, job_id)

  -- atm is counted with the HSET below rather than by HINCRBY: one call less per job.
  local attempts_made = (tonumber(fields[2]) or 0) + 1
  local parent_key = fields[3]

  if outcome == "completed" then
    rcall("HSET", job_key, "atm", attempts_made, "returnvalue", value, "finishedOn", now)
    rcall("ZADD", K_COMPLETED, now, job_id)
    if parent_key then
      child_completed(job_key, parent_key, value, now)
    end
    release_dedup(prefix, fields[4], job_id, now, max_len)
    record_outcome(prefix, fields[5], "completed", value, now)
    if metrics_points > 0 then
      record_metrics(prefix, "completed", now, metrics_points)
    end
    emit(max_len, "completed", "jobId", job_id, "returnvalue", value, "prev", "active")
    apply_retention(K_COMPLETED, prefix, job_id, keep, max_age, now)
  elseif outcome == "failed" then
    rcall("HSET", job_key, "atm", attempts_made, "failedReason", value, "finishedOn", now)
    if stacktrace ~= "" then
      rcall("HSET", job_key, "stacktrace", stacktrace)
    end
    rcall("HDEL", job_key, "defa")
    rcall("ZADD", K_FAILED, now, job_id)
    if parent_key then
      child_failed(job_key, parent_key, value, now)
    end
    release_dedup(prefix, fields[4], job_id, now, max_len)
    record_outcome(prefix, fields[5], "failed", value, now)
    if metrics_points > 0 then
      record_metrics(prefix, "failed", now, metrics_points)
    end
    emit(max_len, "failed", "jobId", job_id, "failedReason", value, "prev", "active")
    emit(max_len, "retries-exhausted", "jobId", job_id, "attemptsMade", attempts_made)
    record_dead_letter(prefix, job_id, job_key, now) -- before removeOnFail may delete it
    apply_retention(K_FAILED, prefix, job_id, keep, max_age, now)
  else
    rcall("HSET", job_key, "atm", attempts_made, "failedReason", value)
    if stacktrace ~= "" then
      rcall("HSET", job_key, "stacktrace", stacktrace)
    end
    if retry_delay > 0 then
      rcall("HSET", job_key, "delay", retry_delay)
      schedule_delayed(job_id, now + retry_delay, max_len)
    else
      local priority = tonumber(rcall("HGET", job_key, "priority")) or 0
      make_ready(job_id, priority, false, max_len, "active")
    end
  end
  return attempts_made
end

-- Event `drained` once a finish leaves the queue with nothing to run or running: no job
-- waiting, prioritized, delayed or active (BullMQ 6.7.0 writes it then, with or without a
-- fetch-next, and not while another job is active or a delayed one is pending).
local function emit_drained_if_empty(max_len)
  if rcall("LLEN", K_WAIT) == 0 and rcall("ZCARD", K_PRIORITIZED) == 0
      and rcall("ZCARD", K_DELAYED) == 0 and rcall("LLEN", K_ACTIVE) == 0 then
    emit(max_len, "drained")
  end
end
