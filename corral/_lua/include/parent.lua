-- Flow bookkeeping between a child and its parent (needs include/scores for fmt).
-- Everything is reached from full job keys, because a parent can live in another queue of
-- the same prefix: a queue's key prefix ("bull:pq:") is the job key up to and including its
-- last ':' (job ids never contain ':'), and its other keys are that prefix plus a suffix.

local function split_job_key(job_key)
  -- A scheduler's iteration id (repeat:<scheduler id>:<ms>) holds colons of its own.
  local queue_prefix, job_id = string.match(job_key, "^(.*:)(repeat:.+:%d+)$")
  if queue_prefix then
    return queue_prefix, job_id
  end
  return string.match(job_key, "^(.*:)([^:]*)$")
end

-- The caller's `now` (epoch ms), or the server's clock for callers that pass none (removals).
local function now_or_server(now)
  if now then
    return now
  end
  local t = rcall("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- XADD an event to the stream of the queue whose key prefix is `qp`, trimmed to that queue's
-- own opts.maxLenEvents: a count from 0 to 2^31 - 1, else the default (as events_max_len in
-- include/events, which scripts of another queue's parent may not include).
local function emit_to(qp, ...)
  local max_len = tonumber(rcall("HGET", qp .. "meta", "opts.maxLenEvents"))
  if not max_len or max_len ~= max_len or max_len < 0 or max_len > 2147483647 then
    max_len = 10000
  end
  rcall("XADD", qp .. "events", "MAXLEN", "~", math.floor(max_len), "*", "event", ...)
end

local function decode_json(raw)
  if not raw then
    return {}
  end
  local ok, value = pcall(cjson.decode, raw)
  if ok and type(value) == "table" then
    return value
  end
  return {}
end

-- Move a parent out of its queue's waiting-children as a new job of that queue would go:
-- delayed `delay` ms from now when its `delay` field is set, prioritized when it has a
-- priority, else wait (the front with lifo), with the marker (unless the queue is paused) and
-- a `delayed` or `waiting{prev: waiting-children}` event on the parent's queue. The placement
-- is scores.lua's push_ready / add_delayed, on another queue's keys. Returns false when the
-- parent was not in waiting-children (already released, active, finished...).
local function release_parent(parent_key, now)
  local qp, parent_id = split_job_key(parent_key)
  if rcall("ZREM", qp .. "waiting-children", parent_id) == 0 then
    return false
  end
  local fields = rcall("HMGET", parent_key, "delay", "priority", "opts")
  local delay = tonumber(fields[1]) or 0
  local priority = tonumber(fields[2]) or 0
  local paused = rcall("HEXISTS", qp .. "meta", "paused") == 1
  if delay > 0 then
    local run_at = now_or_server(now) + delay
    local base = run_at * 4096
    local last = rcall("ZREVRANGEBYSCORE", qp .. "delayed", fmt(base + 4095), fmt(base),
      "WITHSCORES", "LIMIT", 0, 1)
    local score = base
    if last[2] then
      score = math.min(tonumber(last[2]) + 1, base + 4095)
    end
    rcall("ZADD", qp .. "delayed", fmt(score), parent_id)
    emit_to(qp, "delayed", "jobId", parent_id, "delay", fmt(run_at))
    if not paused then
      local first = rcall("ZRANGE", qp .. "delayed", 0, 0, "WITHSCORES")
      rcall("ZADD", qp .. "marker", fmt(math.floor(tonumber(first[2]) / 4096)), "1")
    end
    return true
  end
  if priority > 0 then
    local counter = rcall("INCR", qp .. "pc")
    rcall("ZADD", qp .. "prioritized", fmt(priority * 4294967296 + counter), parent_id)
  elseif decode_json(fields[3]).lifo == true then
    rcall("RPUSH", qp .. "wait", parent_id)
  else
    rcall("LPUSH", qp .. "wait", parent_id)
  end
  if not paused then
    rcall("ZADD", qp .. "marker", 0, "0")
  end
  emit_to(qp, "waiting", "jobId", parent_id, "prev", "waiting-children")
  return true
end

-- Release a parent waiting for its children once none is pending any more.
local function release_if_done(parent_key, now)
  if rcall("SCARD", parent_key .. ":dependencies") == 0 then
    release_parent(parent_key, now)
  end
end

-- A child completed: it is no longer pending, its return value (JSON) is kept in the parent's
-- :processed hash, and the parent is released when it was the last pending child. A parent
-- that is gone (removed meanwhile) gets no keys.
local function child_completed(child_key, parent_key, returnvalue, now)
  if rcall("EXISTS", parent_key) == 0 then
    return
  end
  rcall("SREM", parent_key .. ":dependencies", child_key)
  rcall("HSET", parent_key .. ":processed", child_key, returnvalue)
  release_if_done(parent_key, now)
end

--: BullMQ's short names of the child failure policies, as they appear in `parent` and opts.
local FAILURE_POLICIES = {"fpof", "cpof", "idof", "rdof"}

-- The failure policy of a child: "fpof", "cpof", "idof", "rdof", or nil for none. BullMQ keeps
-- the flag in the child's `parent` JSON and in its opts; either is enough.
local function failure_policy(child_key)
  local fields = rcall("HMGET", child_key, "parent", "opts")
  local parent, opts = decode_json(fields[1]), decode_json(fields[2])
  for _, name in ipairs(FAILURE_POLICIES) do
    if parent[name] == true or opts[name] == true then
      return name
    end
  end
  return nil
end

-- A child failed for good (no attempt left). By its policy:
--   fpof: no longer pending, kept in the parent's :unsuccessful zset (score = now, its
--         finishedOn), `defa` = "child <child key> failed" on the parent, which is released
--         at once; the next fetch of the parent fails it with that reason (include/fetch).
--   cpof: no longer pending, failedReason kept in the parent's :failed hash, parent released
--         at once even if other children are pending.
--   idof: no longer pending, failedReason kept in :failed; released when it was the last.
--   rdof: no longer pending, nothing kept; released when it was the last.
--   none: the parent keeps waiting for it (it stays in :dependencies).
local function child_failed(child_key, parent_key, reason, now)
  if rcall("EXISTS", parent_key) == 0 then
    return
  end
  local policy = failure_policy(child_key)
  if not policy then
    return
  end
  rcall("SREM", parent_key .. ":dependencies", child_key)
  if policy == "fpof" then
    rcall("ZADD", parent_key .. ":unsuccessful", now, child_key)
    rcall("HSET", parent_key, "defa", "child " .. child_key .. " failed")
    release_parent(parent_key, now)
  elseif policy == "cpof" then
    rcall("HSET", parent_key .. ":failed", child_key, reason)
    release_parent(parent_key, now)
  elseif policy == "idof" then
    rcall("HSET", parent_key .. ":failed", child_key, reason)
    release_if_done(parent_key, now)
  else
    release_if_done(parent_key, now)
  end
end
