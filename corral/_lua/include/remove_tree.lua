-- Removing a job, and with it the flow below it (needs include/remove, and include/parent
-- for split_job_key and release_if_done).
-- Everything works from a full job key, because the children of a flow can live in other
-- queues: the queue's key prefix ("bull:q:") is the job key up to and including its last
-- ':' (job ids never contain ':'), and its other keys are that prefix plus a suffix.

-- Full keys of a parent's children: unfinished (:dependencies), completed (:processed), and
-- failed ones it recorded (:failed for ignoreDependencyOnFailure, :unsuccessful for
-- failParentOnFailure).
local function child_keys(job_key)
  local keys = rcall("SMEMBERS", job_key .. ":dependencies")
  for _, k in ipairs(rcall("HKEYS", job_key .. ":processed")) do
    keys[#keys + 1] = k
  end
  for _, k in ipairs(rcall("HKEYS", job_key .. ":failed")) do
    keys[#keys + 1] = k
  end
  for _, k in ipairs(rcall("ZRANGE", job_key .. ":unsuccessful", 0, -1)) do
    keys[#keys + 1] = k
  end
  return keys
end

-- A job is being processed while it is in its queue's active list or holds a lock.
local function is_locked(job_key)
  local queue_prefix, job_id = split_job_key(job_key)
  return rcall("EXISTS", job_key .. ":lock") == 1
    or rcall("LPOS", queue_prefix .. "active", job_id) ~= false
end

-- Reads only. Appends job_key and (with_children) every job below it to `out`, children
-- before their parent. Returns the key of the first active job found (nothing may be removed
-- then), or nil. Keys of jobs that no longer exist are skipped.
local function collect_tree(job_key, with_children, out, seen)
  if seen[job_key] then
    return nil
  end
  seen[job_key] = true
  if rcall("EXISTS", job_key) == 0 then
    return nil
  end
  if is_locked(job_key) then
    return job_key
  end
  if with_children then
    for _, child in ipairs(child_keys(job_key)) do
      local active = collect_tree(child, true, out, seen)
      if active then
        return active
      end
    end
  end
  out[#out + 1] = job_key
  return nil
end

-- Where a job can sit, in the order they are searched; the first that held it is `prev`.
local REMOVABLE_FROM = {
  {"wait", "LREM"}, {"paused", "LREM"}, {"prioritized", "ZREM"}, {"delayed", "ZREM"},
  {"completed", "ZREM"}, {"failed", "ZREM"}, {"waiting-children", "ZREM"},
}

-- Remove one job that is not active: take it out of its queue's lists and sets, unlink it
-- from its parent, free its deduplication id, delete its keys, and emit `removed` on its own
-- queue's events stream. A parent left with no pending child is released, as when its last
-- child completes, unless it is in `removing` (a set of keys going in the same call): a
-- parent removed with its children is not moved to wait on its way out.
local function remove_one(job_key, removing)
  local queue_prefix, job_id = split_job_key(job_key)
  local prev = nil
  for _, where in ipairs(REMOVABLE_FROM) do
    local removed
    if where[2] == "LREM" then
      removed = rcall("LREM", queue_prefix .. where[1], 0, job_id)
    else
      removed = rcall("ZREM", queue_prefix .. where[1], job_id)
    end
    if removed > 0 and not prev then
      prev = where[1]
    end
  end
  local fields = rcall("HMGET", job_key, "parentKey", "deid")
  if fields[1] and rcall("SREM", fields[1] .. ":dependencies", job_key) == 1
    and not (removing and removing[fields[1]]) then
    release_if_done(fields[1], nil)
  end
  if fields[2] then
    local de_key = queue_prefix .. "de:" .. fields[2]
    if rcall("GET", de_key) == job_id then
      rcall("DEL", de_key)
    end
  end
  delete_job(job_key)
  local max_len = tonumber(rcall("HGET", queue_prefix .. "meta", "opts.maxLenEvents")) or 10000
  rcall("XADD", queue_prefix .. "events", "MAXLEN", "~", max_len, "*", "event", "removed",
    "jobId", job_id, "prev", prev or "unknown")
end
