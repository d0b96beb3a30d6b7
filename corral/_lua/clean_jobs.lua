-- clean_jobs: delete the jobs of one state that are older than a cutoff; one batch per call.
--
-- A completed or failed job's time is its score (finishedOn); any other job's time is its
-- `timestamp` field (creation), and an id whose hash is gone is deleted as debris. An active
-- job goes only when it holds no lock: a locked one is being processed.
-- Finished sets are read oldest first by score and every hit goes, so each call starts at the
-- front again. Other states are scanned (their order is not the job's time): lists from the
-- right end (oldest first), zsets by ascending score, at most 1000 entries per call, and the
-- cursor counts the entries examined and kept by earlier calls, so the next call goes on where
-- this one stopped. Jobs that come or go between calls may be missed, never wrongly deleted.
-- A call reads at most SCAN entries past the cursor and writes at most ARGV[4] jobs, so its
-- time is bounded by those (and, for lists, by reaching the cursor's place).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, paused, active,
--       prioritized, delayed, completed, failed, events, meta, stalled.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] state: completed, failed, wait, paused, active, delayed or prioritized
-- ARGV[3] cutoff epoch ms: a job whose time is <= cutoff is deleted
-- ARGV[4] at most this many jobs are deleted by this call (>= 1)
-- ARGV[5] "1" when deleting ARGV[4] jobs reaches the caller's limit, else "0"
-- ARGV[6] cursor: 0 on the first call, then what the previous call returned
-- ARGV[7] how many jobs earlier calls deleted (for the count of the `cleaned` event)
-- ARGV[8] tombstone: a value no list holds, to mark the entries a list sheds in one LREM
--         (default ":", which no job id is: ids hold no ':' but in repeat:<id>:<ms>)
-- Returns {cursor, id1, id2, ...}: the ids deleted by this call; cursor -1 means done, and
-- then the `cleaned{count}` event was written with the total of all calls.
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores
-- @include remove
-- @include parent
-- @include purge

local SCAN = 1000
local prefix = ARGV[1]
local state = ARGV[2]
local cutoff = tonumber(ARGV[3])
local max = tonumber(ARGV[4])
local cursor = tonumber(ARGV[6])
local tombstone = ARGV[8] or ":"
local removed = {}
local exhausted

local function due(job_id)
  local job_key = prefix .. job_id
  local ts = rcall("HGET", job_key, "timestamp")
  if ts and tonumber(ts) > cutoff then
    return false
  end
  return state ~= "active" or rcall("EXISTS", job_key .. ":lock") == 0
end

if state == "completed" or state == "failed" then
  local set_key = K_COMPLETED
  if state == "failed" then
    set_key = K_FAILED
  end
  removed = rcall("ZRANGEBYSCORE", set_key, "-inf", fmt(cutoff), "LIMIT", 0, max)
  for _, job_id in ipairs(removed) do
    purge_job(prefix, job_id)
  end
  if #removed > 0 then
    rcall("ZREM", set_key, unpack(removed))
  end
  exhausted = #removed < max
elseif state == "wait" or state == "paused" or state == "active" then
  local list_key = ({wait = K_WAIT, paused = K_PAUSED, active = K_ACTIVE})[state]
  local base = cursor
  local ids = rcall("LRANGE", list_key, -(base + SCAN), -(base + 1))
  local i = #ids
  -- Due entries at the very end of the list go with one LTRIM; others are marked in place and
  -- all dropped with one LREM: an LREM per id would read the list from its end to the id each
  -- time (the kept entries included).
  local tail_run = base == 0
  local trimmed, marked = 0, 0
  while i >= 1 and #removed < max do
    local job_id = ids[i]
    if due(job_id) then
      if tail_run then
        trimmed = trimmed + 1
      else
        rcall("LSET", list_key, -(base + 1 + #ids - i), tombstone)
        marked = marked + 1
      end
      if state == "active" then
        rcall("SREM", K_STALLED, job_id)
      end
      removed[#removed + 1] = job_id
    else
      tail_run = false
      cursor = cursor + 1
    end
    i = i - 1
  end
  if marked > 0 then
    rcall("LREM", list_key, -marked, tombstone)
  end
  if trimmed > 0 then
    rcall("LTRIM", list_key, 0, -(trimmed + 1))
  end
  if #removed > 0 then
    -- Purged once out of the list: a purge can push a released parent onto this very list.
    for _, job_id in ipairs(removed) do
      purge_job(prefix, job_id)
    end
  end
  exhausted = i < 1 and #ids < SCAN
else
  local set_key = K_DELAYED
  if state == "prioritized" then
    set_key = K_PRIORITIZED
  end
  local ids = rcall("ZRANGE", set_key, cursor, cursor + SCAN - 1)
  local i = 1
  while i <= #ids and #removed < max do
    local job_id = ids[i]
    if due(job_id) then
      purge_job(prefix, job_id)
      removed[#removed + 1] = job_id
    else
      cursor = cursor + 1
    end
    i = i + 1
  end
  if #removed > 0 then
    rcall("ZREM", set_key, unpack(removed))
  end
  exhausted = i > #ids and #ids < SCAN
end

if exhausted or (ARGV[5] == "1" and #removed >= max) then
  emit(events_max_len(), "cleaned", "count", tonumber(ARGV[7]) + #removed)
  cursor = -1
end
local out = {cursor}
for _, job_id in ipairs(removed) do
  out[#out + 1] = job_id
end
return out
