-- Scores are formatted with %.0f: Lua turns numbers into strings with 14 significant digits,
-- which would round BullMQ's 53-bit scores (priority * 2^32 + counter, runAt * 4096 + seq).
local function fmt(n)
  return string.format("%.0f", n)
end

-- Ready a job that has no delay: prioritized zset when priority > 0, else the wait list.
-- Workers pop the right end of wait, so LPUSH queues at the back and RPUSH (lifo) at the front.
local function push_ready(job_id, priority, lifo)
  if priority > 0 then
    local counter = rcall("INCR", K_PC)
    rcall("ZADD", K_PRIORITIZED, fmt(priority * 4294967296 + counter), job_id)
  elseif lifo then
    rcall("RPUSH", K_WAIT, job_id)
  else
    rcall("LPUSH", K_WAIT, job_id)
  end
end

-- Point the "1" marker at the earliest delayed job so a blocked worker wakes when it is due.
local function mark_next_delayed()
  local first = rcall("ZRANGE", K_DELAYED, 0, 0, "WITHSCORES")
  if first[2] then
    rcall("ZADD", K_MARKER, fmt(math.floor(tonumber(first[2]) / 4096)), "1")
  end
end

-- Add to the delayed zset at runAt * 4096 + seq; seq orders jobs due in the same millisecond.
local function add_delayed(job_id, run_at)
  local base = run_at * 4096
  local last = rcall("ZREVRANGEBYSCORE", K_DELAYED, fmt(base + 4095), fmt(base), "WITHSCORES",
    "LIMIT", 0, 1)
  local score = base
  if last[2] then
    score = math.min(tonumber(last[2]) + 1, base + 4095)
  end
  rcall("ZADD", K_DELAYED, fmt(score), job_id)
end

-- A script that adds many jobs (add_jobs.lua) runs as a batch: between begin_batch() and
-- end_batch() the paused flag is read once and the workers' wake-up marker written once,
-- instead of once per job. Nothing else runs during a script, so the result is the same.
local batch = nil

local function begin_batch()
  batch = {paused = rcall("HEXISTS", K_META, "paused") == 1, wake = false, meta = false}
end

local function end_batch()
  if batch.wake then
    rcall("ZADD", K_MARKER, 0, "0")
  end
  batch = nil
end

local function is_paused()
  if batch then
    return batch.paused
  end
  return rcall("HEXISTS", K_META, "paused") == 1
end

-- Wake a worker blocked on the marker.
local function wake_workers()
  if batch then
    batch.wake = true
  else
    rcall("ZADD", K_MARKER, 0, "0")
  end
end

-- Park a job in delayed until run_at, with its `delayed` event (needs include/events).
local function schedule_delayed(job_id, run_at, max_len)
  add_delayed(job_id, run_at)
  emit(max_len, "delayed", "jobId", job_id, "delay", fmt(run_at))
  if not is_paused() then
    mark_next_delayed()
  end
end

-- Make a job ready now and wake a worker unless the queue is paused; `prev` is the state it
-- left, or nil for a new job (needs include/events).
local function make_ready(job_id, priority, lifo, max_len, prev)
  push_ready(job_id, priority, lifo)
  if not is_paused() then
    wake_workers()
  end
  if prev then
    emit(max_len, "waiting", "jobId", job_id, "prev", prev)
  else
    emit(max_len, "waiting", "jobId", job_id)
  end
end
