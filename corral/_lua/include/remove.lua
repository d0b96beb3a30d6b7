-- Delete a job's hash and every key hanging off it. UNLINK: a parent's 100k-entry
-- :processed or a long :logs list is freed in the background, not inside this call (Redis 7
-- frees a DEL in the foreground unless lazyfree-lazy-user-del is set).
local function delete_job(job_key)
  rcall("UNLINK", job_key, job_key .. ":logs", job_key .. ":lock", job_key .. ":dependencies",
    job_key .. ":processed", job_key .. ":failed", job_key .. ":unsuccessful",
    job_key .. ":x-stream", job_key .. ":x-signals", job_key .. ":x-steps")
end

-- removeOnComplete / removeOnFail on the finished set `set_key`: keep at most `keep` jobs
-- (-1: no limit, 0: remove this job now) and none finished before now - max_age_ms (-1: none).
-- At most RETENTION_BATCH jobs go per call, so one finish never blocks the server for long
-- (about a millisecond): a queue that kept a million jobs and now keeps ten sheds its surplus
-- over the next finishes, 99 more with each, instead of a 10 ms pause at each of them.
local RETENTION_BATCH = 100
local function apply_retention(set_key, prefix, job_id, keep, max_age_ms, now)
  if keep == 0 then
    rcall("ZREM", set_key, job_id)
    delete_job(prefix .. job_id)
    return
  end
  if max_age_ms >= 0 then
    local old = rcall("ZRANGEBYSCORE", set_key, "-inf", "(" .. fmt(now - max_age_ms), "LIMIT", 0,
      RETENTION_BATCH)
    for _, id in ipairs(old) do
      delete_job(prefix .. id)
    end
    if #old > 0 then
      rcall("ZREM", set_key, unpack(old))
    end
  end
  if keep > 0 then
    -- Count first and read only the surplus: reading ranks 0..-(keep+1) would return the
    -- whole set when most of it is surplus (a queue that kept 1M jobs, then keeps 10).
    local n = math.min(rcall("ZCARD", set_key) - keep, RETENTION_BATCH)
    if n > 0 then
      local extra = rcall("ZRANGE", set_key, 0, n - 1)
      for i = 1, n do
        delete_job(prefix .. extra[i])
      end
      rcall("ZREMRANGEBYRANK", set_key, 0, n - 1)
    end
  end
end
