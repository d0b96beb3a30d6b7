-- Move due delayed jobs to wait/prioritized (at most 1000 per call), with `waiting` events.
local function promote_delayed(prefix, now, max_len)
  local due = rcall("ZRANGEBYSCORE", K_DELAYED, 0, fmt((now + 1) * 4096 - 1), "LIMIT", 0, 1000)
  if #due == 0 then
    return 0
  end
  rcall("ZREM", K_DELAYED, unpack(due))
  for _, job_id in ipairs(due) do
    local job_key = prefix .. job_id
    local priority = tonumber(rcall("HGET", job_key, "priority")) or 0
    push_ready(job_id, priority, false)
    rcall("HSET", job_key, "delay", 0)
    emit(max_len, "waiting", "jobId", job_id, "prev", "delayed")
  end
  return #due
end

-- What a worker asks of a fetch: ARGV[i..i+7] as corral._scripts.FetchNext.args() lays
-- them out (count, token base, first token seq, lock ms, worker name, max stalled count,
-- limiter max, limiter duration ms). Missing trailing values take their defaults.
local function fetch_spec(i)
  return {
    count = tonumber(ARGV[i]) or 0,
    token_base = ARGV[i + 1] or "",
    token_seq = tonumber(ARGV[i + 2]) or 0,
    lock_ms = ARGV[i + 3] or "30000",
    worker = ARGV[i + 4] or "",
    max_stalled = tonumber(ARGV[i + 5]) or 1,
    limit_max = tonumber(ARGV[i + 6]) or 0,
    limit_ms = tonumber(ARGV[i + 7]) or 0,
  }
end

-- removeOnFail of a job's opts as apply_retention's (keep count, max age ms); -1: no limit.
local function fail_retention(job_key)
  local ok, opts = pcall(cjson.decode, rcall("HGET", job_key, "opts") or "{}")
  local value = ok and type(opts) == "table" and opts.removeOnFail
  if value == true then
    return 0, -1
  elseif type(value) == "number" then
    return value, -1
  elseif type(value) == "table" then
    local count, age = tonumber(value.count), tonumber(value.age)
    return count or -1, age and age * 1000 or -1
  end
  return -1, -1
end

-- Fail a job for good where no worker's finish does it: at fetch (fail_at_fetch below) and
-- when it is cancelled (cancel_job.lua). The caller has taken the job out of the list or
-- zset that held it; `prev` names that state for the event. failedReason, finishedOn, `defa`
-- cleared, failed set, its own parent told by its failure policy (so a deferred failure climbs
-- the tree one fetch per level), dedup id released, idempotency outcome recorded,
-- `failed{failedReason, prev}`, the dead-letter record (include/dead_letter), removeOnFail
-- (needs include/remove, parent, dedup and dead_letter).
-- `attempted`: a worker took the job, so this ends an attempt: atm + 1 and
-- `retries-exhausted{attemptsMade}` after `failed`, as a worker's final failure writes them.
-- A job that never ran has made no attempt: its atm stays, and no retries were exhausted.
local function fail_for_good(prefix, job_id, job_key, reason, prev, attempted, now, max_len)
  local attempts
  if attempted then
    attempts = rcall("HINCRBY", job_key, "atm", 1)
  end
  rcall("HSET", job_key, "failedReason", reason, "finishedOn", now)
  rcall("HDEL", job_key, "defa")
  rcall("ZADD", K_FAILED, now, job_id)
  local fields = rcall("HMGET", job_key, "parentKey", "deid", "x-idem")
  if fields[1] then
    child_failed(job_key, fields[1], reason, now)
  end
  release_dedup(prefix, fields[2], job_id, now, max_len)
  record_outcome(prefix, fields[3], "failed", reason, now)
  emit(max_len, "failed", "jobId", job_id, "failedReason", reason, "prev", prev)
  if attempted then
    emit(max_len, "retries-exhausted", "jobId", job_id, "attemptsMade", attempts)
  end
  record_dead_letter(prefix, job_id, job_key, now) -- before removeOnFail may delete it
  local keep, max_age = fail_retention(job_key)
  apply_retention(K_FAILED, prefix, job_id, keep, max_age, now)
end

-- Some jobs fail at fetch and never reach a processor, as with BullMQ's workers: one
-- recovered from stalls more than max_stalled times, and a flow parent carrying `defa` (a
-- failParentOnFailure child failed). The failure is final, like the worker's, and counts as
-- the attempt the fetch started (fail_for_good with `attempted`).
local function fail_at_fetch(prefix, job_id, job_key, reason, now, max_len)
  rcall("LREM", K_ACTIVE, -1, job_id)
  fail_for_good(prefix, job_id, job_key, reason, "active", true, now, max_len)
end

-- Take up to spec.count ready jobs: wait first (its right end), then the lowest prioritized.
-- Each gets a lock `token_base:<n>`, processedOn, ats + 1 and pb (when the worker is named).
-- Appends {id, token, HGETALL} triples to `out`. Returns how many were taken, and the ms
-- the rate limiter still blocks fetching (0 when it does not).
local function take_jobs(out, prefix, now, spec, max_len)
  local meta = rcall("HMGET", K_META, "paused", "concurrency", "max", "duration")
  if meta[1] then
    return 0, 0
  end
  local count = spec.count
  if meta[2] then
    -- Global concurrency: never more than meta.concurrency jobs active in the whole queue.
    count = math.min(count, tonumber(meta[2]) - rcall("LLEN", K_ACTIVE))
  end
  -- The worker's limiter wins over the queue's global rate limit (meta max/duration).
  local limit_max, limit_ms = spec.limit_max, spec.limit_ms
  if limit_max <= 0 and meta[3] then
    limit_max, limit_ms = tonumber(meta[3]), tonumber(meta[4]) or 0
  end
  local used = tonumber(rcall("GET", K_LIMITER) or "0")
  -- 9007199254740991 is what Queue.rate_limit() writes: a pause of every worker.
  if used >= 9007199254740991 or (limit_max > 0 and used >= limit_max) then
    local ttl = rcall("PTTL", K_LIMITER)
    if ttl < 0 then
      -- A counter without expiry would block forever: give it the window it should have.
      ttl = limit_ms > 0 and limit_ms or 1000
      rcall("PEXPIRE", K_LIMITER, ttl)
    end
    return 0, ttl
  end
  if limit_max > 0 then
    count = math.min(count, limit_max - used)
  end
  local taken = 0
  local now_text = fmt(now)
  -- Parked jobs that are due (signalled, or their wait timed out) go first, straight from
  -- delayed to active (include/parked.lua).
  local woken, next_woken = due_parked(prefix, now, count), 1
  while taken < count do
    local job_id, prev = nil, "waiting"
    while not job_id and next_woken <= #woken do
      if unpark(prefix, woken[next_woken]) then
        job_id, prev = woken[next_woken], "delayed"
      end
      next_woken = next_woken + 1
    end
    if not job_id then
      job_id = rcall("RPOPLPUSH", K_WAIT, K_ACTIVE)
    end
    if not job_id then
      local popped = rcall("ZPOPMIN", K_PRIORITIZED)
      if not popped[1] then
        rcall("DEL", K_PC)
        break
      end
      job_id = popped[1]
      rcall("LPUSH", K_ACTIVE, job_id)
    end
    local job_key = prefix .. job_id
    if limit_max > 0 then
      if rcall("INCR", K_LIMITER) == 1 then
        rcall("PEXPIRE", K_LIMITER, limit_ms)
      end
    end
    -- One read of the hash: the guards' fields come from the HGETALL the worker gets anyway
    -- (a call less per job than an HMGET of them).
    local flat = rcall("HGETALL", job_key)
    local stc, defa, ats = 0, nil, 0
    for i = 1, #flat, 2 do
      local field = flat[i]
      if field == "stc" then
        stc = tonumber(flat[i + 1]) or 0
      elseif field == "defa" then
        defa = flat[i + 1]
      elseif field == "ats" then
        ats = tonumber(flat[i + 1]) or 0
      end
    end
    if #flat == 0 then
      -- An id with no job hash (removed by force, or a marker an old BullMQ pushed into
      -- wait): dropped, never locked, and no hash is made for it.
      rcall("LREM", K_ACTIVE, -1, job_id)
    elseif stc > spec.max_stalled then
      fail_at_fetch(prefix, job_id, job_key, "job stalled more than allowable limit", now, max_len)
    elseif defa then
      fail_at_fetch(prefix, job_id, job_key, defa, now, max_len)
    else
      local token = spec.token_base .. ":" .. (spec.token_seq + taken)
      rcall("SET", job_key .. ":lock", token, "PX", spec.lock_ms)
      -- ats is counted with the HSET (read above) rather than by HINCRBY: one call less.
      ats = ats + 1
      local n = #flat
      -- The fields written now, appended to what was read: pairs read later win, as in a
      -- dict built from the flat list.
      flat[n + 1], flat[n + 2] = "processedOn", now_text
      flat[n + 3], flat[n + 4] = "ats", tostring(ats)
      if spec.worker ~= "" then
        rcall("HSET", job_key, "processedOn", now_text, "ats", ats, "pb", spec.worker)
        flat[n + 5], flat[n + 6] = "pb", spec.worker
      else
        rcall("HSET", job_key, "processedOn", now_text, "ats", ats)
      end
      emit(max_len, "active", "jobId", job_id, "prev", prev)
      taken = taken + 1
      out[#out + 1] = job_id
      out[#out + 1] = token
      out[#out + 1] = flat
    end
  end
  if taken > 0 and (rcall("LLEN", K_WAIT) > 0 or rcall("ZCARD", K_PRIORITIZED) > 0) then
    -- Work is left: wake another blocked worker.
    rcall("ZADD", K_MARKER, 0, "0")
  end
  return taken, 0
end

-- The epoch ms at which the next delayed job, or parked job, is due after now (0 when there
-- is none); re-arms the marker. Parked jobs' PARKED_SCORE is no due time (include/parked.lua).
local function next_delayed_at(prefix, now)
  local first = rcall("ZRANGEBYSCORE", K_DELAYED, "-inf", "(" .. PARKED_SCORE, "WITHSCORES",
    "LIMIT", 0, 1)
  local at = first[2] and math.floor(tonumber(first[2]) / 4096) or 0
  local parked_at = next_parked_at(prefix, now)
  if parked_at > 0 and (at == 0 or parked_at < at) then
    at = parked_at
  end
  if at > 0 then
    rcall("ZADD", K_MARKER, fmt(at), "1")
  end
  return at
end

-- When a fetch takes nothing, what the worker should wait for: -ttl (rate limited for ttl
-- ms), or the epoch ms of the next delayed or parked job (0: nothing is scheduled).
local function wake_hint(limit_ttl, prefix, now)
  if limit_ttl > 0 then
    return -limit_ttl
  end
  return next_delayed_at(prefix, now)
end

