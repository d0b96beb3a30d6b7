-- Removing jobs, and with them the flows below them (needs include/events for stored_count,
-- include/scores, and include/parent for split_job_key and release_if_done).
-- Everything works from a full job key, because the children of a flow can live in other
-- queues: the queue's key prefix ("bull:q:") is the job key up to and including its last
-- ':' (job ids never contain ':'), and its other keys are that prefix plus a suffix.
--
-- Finding a job costs little in a zset (ZSCORE) and a scan in a list: LREM reads the list up
-- to the id, so removing n jobs of a list of n with one LREM each reads n^2/2 entries (30k
-- children in wait: 9 s of server time in one call). Lists are therefore searched once per
-- call for all the jobs the call removes (take_from_list), and the callers bound the work.

-- The states kept in zsets, in the order they are searched.
local ZSET_STATES = {"prioritized", "delayed", "completed", "failed", "waiting-children"}

-- The zset of its queue that holds a job, or nil (it is in a list, or nowhere).
local function zset_state(queue_prefix, job_id)
  for _, name in ipairs(ZSET_STATES) do
    if rcall("ZSCORE", queue_prefix .. name, job_id) then
      return name
    end
  end
  return nil
end

-- How many children a parent has recorded: unfinished (:dependencies), completed
-- (:processed), and failed ones it kept (:failed for ignoreDependencyOnFailure,
-- :unsuccessful for failParentOnFailure).
local function child_count(job_key)
  return rcall("SCARD", job_key .. ":dependencies") + rcall("HLEN", job_key .. ":processed")
    + rcall("HLEN", job_key .. ":failed") + rcall("ZCARD", job_key .. ":unsuccessful")
end

-- Their full keys; the pending ones (:dependencies) come last, so that removing the children
-- in this order keeps the parent waiting for one of them until the last (see remove_jobs.lua).
local function child_keys(job_key)
  local keys = rcall("HKEYS", job_key .. ":processed")
  for _, k in ipairs(rcall("HKEYS", job_key .. ":failed")) do
    keys[#keys + 1] = k
  end
  for _, k in ipairs(rcall("ZRANGE", job_key .. ":unsuccessful", 0, -1)) do
    keys[#keys + 1] = k
  end
  for _, k in ipairs(rcall("SMEMBERS", job_key .. ":dependencies")) do
    keys[#keys + 1] = k
  end
  return keys
end

-- UNLINK rather than DEL: a parent's :processed hash or a long :logs list is then freed by the
-- server's background thread, so deleting a job costs the same whatever it holds.
local function unlink_job(job_key)
  rcall("UNLINK", job_key, job_key .. ":logs", job_key .. ":lock", job_key .. ":dependencies",
    job_key .. ":processed", job_key .. ":failed", job_key .. ":unsuccessful",
    job_key .. ":x-stream", job_key .. ":x-signals", job_key .. ":x-steps")
end

-- The events cap of each queue met in this call, read once per queue.
local removed_events_len = {}
local function emit_removed(queue_prefix, job_id, prev)
  local max_len = removed_events_len[queue_prefix]
  if not max_len then
    max_len = stored_count(rcall("HGET", queue_prefix .. "meta", "opts.maxLenEvents"), 10000)
    removed_events_len[queue_prefix] = max_len
  end
  rcall("XADD", queue_prefix .. "events", "MAXLEN", "~", max_len, "*", "event", "removed",
    "jobId", job_id, "prev", prev)
end

-- The rest of removing a job once it is out of its list or zset (`prev` names it): unlink it
-- from its parent's :dependencies, free its deduplication id, delete its keys, and emit
-- `removed{jobId, prev}` on its own queue's stream. A parent left with no pending child is
-- released, as when its last child completes, unless `hold` says it is part of the same
-- removal (hold == true: every parent; else a table of parent keys): a parent removed with its
-- children is not moved to wait on its way out.
local function forget_job(job_key, prev, hold)
  local queue_prefix, job_id = split_job_key(job_key)
  local fields = rcall("HMGET", job_key, "parentKey", "deid")
  local parent = fields[1]
  if parent and rcall("SREM", parent .. ":dependencies", job_key) == 1
    and hold ~= true and not hold[parent] then
    release_if_done(parent, nil)
  end
  if fields[2] then
    local de_key = queue_prefix .. "de:" .. fields[2]
    if rcall("GET", de_key) == job_id then
      rcall("DEL", de_key)
    end
  end
  unlink_job(job_key)
  emit_removed(queue_prefix, job_id, prev or "unknown")
end

-- Take ids out of a list with one read of it instead of one scan per id: read at most `limit`
-- entries from index `start` (0-based) in pages, overwrite every entry that `wanted` (a table
-- id -> true, `n` ids) names with `tombstone` (a value no list holds), then drop them all with
-- one LREM from the nearer end. Nothing else runs meanwhile, so no reader ever sees a
-- tombstone. Returns a table id -> true of the ids taken out, and whether the whole list was
-- read (an id not taken out is then in no place of this list).
local function take_from_list(list_key, wanted, n, start, limit, tombstone)
  local len = rcall("LLEN", list_key)
  if len == 0 or n == 0 then
    return {}, true
  end
  if start >= len then
    -- The list shrank since the caller read it: read its end.
    start = math.max(0, len - limit)
  end
  local stop = math.min(len, start + limit) - 1
  local found, seen, hits, lo, hi = {}, 0, 0, nil, nil
  local i = start
  while i <= stop and seen < n do
    local page = rcall("LRANGE", list_key, i, math.min(i + 999, stop))
    if #page == 0 then
      break
    end
    for j, id in ipairs(page) do
      if wanted[id] then
        if not found[id] then
          found[id] = true
          seen = seen + 1
        end
        local index = i + j - 1
        rcall("LSET", list_key, index, tombstone)
        hits = hits + 1
        lo = lo or index
        hi = index
      end
    end
    i = i + #page
  end
  if hits > 0 then
    -- LREM reads from one end up to the last match: from the head when the matches are
    -- nearer the head, else from the tail (a negative count).
    if hi < len - lo then
      rcall("LREM", list_key, hits, tombstone)
    else
      rcall("LREM", list_key, -hits, tombstone)
    end
  end
  return found, start == 0 and i > len - 1
end

-- Reads only. Appends job_key and (with_children) every job below it to `out` (as
-- {key, zset state or false}), children before their parent, pending children last, while
-- `budget` allows: budget.jobs is how many more jobs may be taken and budget.scan how many
-- more list entries removing them may read (a job in no zset is searched for in its queue's
-- wait and paused lists, and each job in the active list). Returns "active", key when a job
-- of the tree is being processed (nothing may be removed then), "big" when the tree is over
-- the budget (the caller removes it in bounded calls instead), else nil. Keys of jobs that no
-- longer exist are skipped. `seen` collects every key met.
local function collect_tree(job_key, with_children, out, seen, budget)
  if seen[job_key] then
    return nil
  end
  seen[job_key] = true
  if rcall("EXISTS", job_key) == 0 then
    return nil
  end
  if rcall("EXISTS", job_key .. ":lock") == 1 then
    return "active", job_key
  end
  local queue_prefix, job_id = split_job_key(job_key)
  local state = zset_state(queue_prefix, job_id)
  budget.jobs = budget.jobs - 1
  budget.scan = budget.scan - rcall("LLEN", queue_prefix .. "active")
  if not state then
    budget.scan = budget.scan - rcall("LLEN", queue_prefix .. "wait")
      - rcall("LLEN", queue_prefix .. "paused")
  end
  if budget.jobs < 0 or budget.scan < 0 then
    return "big"
  end
  if rcall("LPOS", queue_prefix .. "active", job_id) then
    return "active", job_key
  end
  if with_children then
    -- Counted before they are read: reading 100k keys to learn the tree is too big would be
    -- the unbounded call this avoids.
    if child_count(job_key) > budget.jobs then
      return "big"
    end
    for _, child in ipairs(child_keys(job_key)) do
      local verdict, key = collect_tree(child, true, out, seen, budget)
      if verdict then
        return verdict, key
      end
    end
  end
  out[#out + 1] = {job_key, state or false}
  return nil
end

-- Remove the jobs collect_tree gathered, in its order, in one call (all of them: the caller
-- saw that none is active). `hold`: the parents not to release (forget_job).
local function remove_collected(tree, hold)
  for _, entry in ipairs(tree) do
    local job_key, state = entry[1], entry[2]
    local queue_prefix, job_id = split_job_key(job_key)
    local prev = state
    if state then
      rcall("ZREM", queue_prefix .. state, job_id)
    elseif rcall("LREM", queue_prefix .. "wait", 0, job_id) > 0 then
      prev = "wait"
    elseif rcall("LREM", queue_prefix .. "paused", 0, job_id) > 0 then
      prev = "paused"
    end
    forget_job(job_key, prev, hold)
  end
end
