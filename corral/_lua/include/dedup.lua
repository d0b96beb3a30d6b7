-- Deduplication ids (K:de:<id>, K:dn:<id>), corral's idempotency records (K:x-idem:<key>)
-- and BullMQ's per-minute metrics, as a job finishes. Needs include/keys, events, scores.

-- A job that finished frees its deduplication id, as BullMQ does: a key without a TTL (simple
-- mode) is deleted; one with a TTL (throttle, debounce) lives on until it expires. With
-- keep-last-if-active, the add kept in K:dn:<id> while this job ran becomes a job now, under
-- the id reserved for it, and takes the deduplication id over. `dedup_id` is the job's `deid`
-- field (false: none), read by the caller with the other fields it needs.
local function release_dedup(prefix, dedup_id, job_id, now, max_len)
  if not dedup_id then
    return
  end
  local de_key = prefix .. "de:" .. dedup_id
  local next_key = prefix .. "dn:" .. dedup_id
  local kept = rcall("HMGET", next_key, "name", "data", "opts", "jid")
  if kept[4] then
    rcall("DEL", next_key)
    local next_id = kept[4]
    local ok, opts = pcall(cjson.decode, kept[3] or "{}")
    if not ok or type(opts) ~= "table" then
      opts = {}
    end
    local delay = tonumber(opts.delay) or 0
    local priority = tonumber(opts.priority) or 0
    rcall("HSET", prefix .. next_id, "name", kept[1], "data", kept[2], "opts", kept[3],
      "timestamp", now, "delay", delay, "priority", priority, "deid", dedup_id)
    rcall("SET", de_key, next_id)
    emit(max_len, "added", "jobId", next_id, "name", kept[1])
    if delay > 0 then
      schedule_delayed(next_id, now + delay, max_len)
    else
      make_ready(next_id, priority, opts.lifo == true, max_len, nil)
    end
  elseif rcall("GET", de_key) == job_id and rcall("PTTL", de_key) == -1 then
    rcall("DEL", de_key)
  end
end

-- The outcome of a job added with an idempotency key, kept in its record (K:x-idem:<key>) so
-- that a repeated add within the window answers with it even after the job is removed.
-- `key` is the job's `x-idem` field (false: none).
local function record_outcome(prefix, key, state, value, now)
  if key then
    local record = prefix .. "x-idem:" .. key
    if rcall("EXISTS", record) == 1 then
      rcall("HSET", record, "state", state, "value", value, "finishedOn", now)
    end
  end
end

-- BullMQ's metrics (K:metrics:<kind>): a running count, and one data point per minute in
-- K:metrics:<kind>:data (newest first, at most max_points), written when a finish finds that
-- a minute or more has passed since the last point: the jobs of that period, then a 0 for
-- each further minute without a point.
local function record_metrics(prefix, kind, now, max_points)
  local key = prefix .. "metrics:" .. kind
  local count = rcall("HINCRBY", key, "count", 1)
  local prev = rcall("HMGET", key, "prevTS", "prevCount")
  if not prev[1] then
    rcall("HSET", key, "prevTS", now, "prevCount", 0)
    return
  end
  local minutes = math.floor((now - tonumber(prev[1])) / 60000)
  if minutes > 0 then
    local data_key = key .. ":data"
    rcall("LPUSH", data_key, count - 1 - (tonumber(prev[2]) or 0))
    for _ = 2, math.min(minutes, max_points) do
      rcall("LPUSH", data_key, 0)
    end
    rcall("LTRIM", data_key, 0, max_points - 1)
    rcall("HSET", key, "prevTS", now, "prevCount", count - 1)
  end
end
