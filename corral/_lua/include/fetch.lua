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

-- Take up to `count` ready jobs: wait first (its right end), then the lowest prioritized.
-- Each gets a lock `token_base:<n>`, processedOn, ats + 1 and pb (when the worker is named).
-- Appends {id, token, HGETALL} triples to `out` and returns how many were taken.
local function take_jobs(out, prefix, now, count, token_base, token_seq, lock_ms, worker, max_len)
  local meta = rcall("HMGET", K_META, "paused", "concurrency")
  if meta[1] then
    return 0
  end
  if meta[2] then
    -- Global concurrency: never more than meta.concurrency jobs active in the whole queue.
    local room = tonumber(meta[2]) - rcall("LLEN", K_ACTIVE)
    if room < count then
      count = room
    end
  end
  local taken = 0
  while taken < count do
    local job_id = rcall("RPOPLPUSH", K_WAIT, K_ACTIVE)
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
    local token = token_base .. ":" .. (token_seq + taken)
    rcall("SET", job_key .. ":lock", token, "PX", lock_ms)
    if worker ~= "" then
      rcall("HSET", job_key, "processedOn", now, "pb", worker)
    else
      rcall("HSET", job_key, "processedOn", now)
    end
    rcall("HINCRBY", job_key, "ats", 1)
    emit(max_len, "active", "jobId", job_id, "prev", "waiting")
    taken = taken + 1
    out[#out + 1] = job_id
    out[#out + 1] = token
    out[#out + 1] = rcall("HGETALL", job_key)
  end
  if taken > 0 and (rcall("LLEN", K_WAIT) > 0 or rcall("ZCARD", K_PRIORITIZED) > 0) then
    -- Work is left: wake another blocked worker.
    rcall("ZADD", K_MARKER, 0, "0")
  end
  return taken
end

-- The epoch ms at which the next delayed job is due (0 when there is none); re-arms the marker.
local function next_delayed_at()
  local first = rcall("ZRANGE", K_DELAYED, 0, 0, "WITHSCORES")
  if first[2] then
    local at = math.floor(tonumber(first[2]) / 4096)
    rcall("ZADD", K_MARKER, fmt(at), "1")
    return at
  end
  return 0
end
