-- Parked jobs (job.wait_for_signal): in delayed for BullMQ, out of every Node worker's reach.
--
-- A parked job sits in the delayed zset (Node's getState says "delayed", bull-board lists it,
-- its `delay` field holds the real wait) but at PARKED_SCORE, a run time no job reaches, so no
-- worker's promotion of due delayed jobs ever moves it. When it should run again (its signal
-- came, or its wait timed out) is kept apart, in corral's zset K:x-parked (job id -> epoch ms),
-- which only corral's fetch (include/fetch.lua) reads: it moves such a job delayed -> active
-- itself, never through wait, so a Node worker on the queue never runs it from the start.
-- Needs include/keys and include/scores.

-- (2^41 - 1) * 4096: corral.bounds.MAX_TIMESTAMP_MS as a delayed score. Every real delayed
-- score is below it (delays are bounded by that time).
local PARKED_SCORE = "9007199254736896"

local function parked_key(prefix)
  return prefix .. "x-parked"
end

-- Park the job until `due` (epoch ms) unless woken sooner; the caller has taken it out of
-- active. The "1" marker is pulled earlier when needed, so a blocked worker wakes at `due`.
local function park(prefix, job_id, due)
  rcall("ZADD", K_DELAYED, PARKED_SCORE, job_id)
  rcall("ZADD", parked_key(prefix), fmt(due), job_id)
  local armed = tonumber(rcall("ZSCORE", K_MARKER, "1"))
  if not is_paused() and (not armed or armed > due) then
    rcall("ZADD", K_MARKER, fmt(due), "1")
  end
end

-- Make a parked job due now (its signal came): the next fetch takes it. False when the job
-- is not parked.
local function wake_parked(prefix, job_id, now)
  if not rcall("ZSCORE", parked_key(prefix), job_id) then
    return false
  end
  rcall("ZADD", parked_key(prefix), fmt(now), job_id)
  if not is_paused() then
    wake_workers()
  end
  return true
end

-- Up to `count` parked job ids due by `now`, earliest first.
local function due_parked(prefix, now, count)
  if count <= 0 then
    return {}
  end
  return rcall("ZRANGEBYSCORE", parked_key(prefix), "-inf", fmt(now), "LIMIT", 0, count)
end

-- Take a due parked job out of delayed into active. False for an entry left behind by a job
-- that is no longer parked (removed, promoted by hand, re-added under the same id): the entry
-- is dropped and the job left where it is.
local function unpark(prefix, job_id)
  rcall("ZREM", parked_key(prefix), job_id)
  if rcall("HEXISTS", prefix .. job_id, "x-wait") == 0 then
    return false
  end
  if rcall("ZREM", K_DELAYED, job_id) == 0 then
    return false
  end
  rcall("LPUSH", K_ACTIVE, job_id)
  rcall("HSET", prefix .. job_id, "delay", 0)
  return true
end

-- The earliest time a parked job is due after `now` (0: none).
local function next_parked_at(prefix, now)
  local first = rcall("ZRANGEBYSCORE", parked_key(prefix), "(" .. fmt(now), "+inf", "WITHSCORES",
    "LIMIT", 0, 1)
  return tonumber(first[2]) or 0
end
