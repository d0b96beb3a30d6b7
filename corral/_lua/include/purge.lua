-- Bulk removal for the queue-wide operations (drain, clean, obliterate), which know where each
-- job sits: unlike remove_tree.lua's remove_one, nothing is searched and no `removed` event is
-- written per job, so a batch of 1000 stays cheap (needs include/remove, include/scores and
-- include/parent).

-- Delete one job: unlink it from its parent's :dependencies, free its deduplication id when
-- that still names this job (a later add with the id must not be refused), then delete its
-- hash and sub-keys. The caller takes the id out of the list or set that held it.
local function purge_job(prefix, job_id)
  local job_key = prefix .. job_id
  local fields = rcall("HMGET", job_key, "parentKey", "deid")
  if fields[1] and rcall("SREM", fields[1] .. ":dependencies", job_key) == 1 then
    -- The parent's last pending child is gone: it runs now, as after a completion.
    release_if_done(fields[1], nil)
  end
  if fields[2] then
    local de_key = prefix .. "de:" .. fields[2]
    if rcall("GET", de_key) == job_id then
      rcall("DEL", de_key)
    end
  end
  delete_job(job_key)
end

-- Purge up to n jobs from the left end (index 0) of a list; returns how many went.
local function purge_list_head(prefix, key, n)
  if n <= 0 then
    return 0
  end
  local ids = rcall("LRANGE", key, 0, n - 1)
  -- Trimmed before the jobs go: a purge can push a released parent onto this very list.
  if #ids > 0 then
    rcall("LTRIM", key, #ids, -1)
  end
  for _, job_id in ipairs(ids) do
    purge_job(prefix, job_id)
  end
  return #ids
end

-- Purge up to n jobs with the lowest scores of a zset; returns how many went.
local function purge_zset_head(prefix, key, n)
  if n <= 0 then
    return 0
  end
  local ids = rcall("ZRANGE", key, 0, n - 1)
  -- Removed before the jobs go: a purge can add a released parent to this very zset.
  if #ids > 0 then
    rcall("ZREMRANGEBYRANK", key, 0, #ids - 1)
  end
  for _, job_id in ipairs(ids) do
    purge_job(prefix, job_id)
  end
  return #ids
end
