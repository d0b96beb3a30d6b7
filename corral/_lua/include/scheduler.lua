-- Job schedulers (BullMQ 6.x): K:repeat (zset: scheduler id -> next run ms), the scheduler hash
-- K:repeat:<id>, and its iterations, ordinary jobs with id "repeat:<id>:<run ms>" and field rjk.
-- Needs include/keys, include/events, include/scores and include/remove.

-- The fields of a scheduler hash that say when it runs, in Node's order (corral.schedule's
-- TIMING_FIELDS: scripts get them as ARGV in this order).
local TIMING_FIELDS = {"tz", "limit", "pattern", "startDate", "endDate", "every"}

-- A scheduler's template and timing as a script's ARGV gives them: the template's name at
-- ARGV[name_at], its data and opts JSON next ("" = none), the timing fields in TIMING_FIELDS
-- order from ARGV[timing_at] ("" = absent).
local function scheduler_from_args(name_at, timing_at)
  local s = {name = ARGV[name_at]}
  if ARGV[name_at + 1] ~= "" then
    s.data = ARGV[name_at + 1]
  end
  if ARGV[name_at + 2] ~= "" then
    s.opts = ARGV[name_at + 2]
  end
  for i, field in ipairs(TIMING_FIELDS) do
    if ARGV[timing_at - 1 + i] ~= "" then
      s[field] = ARGV[timing_at - 1 + i]
    end
  end
  return s
end

-- The scheduler hash's fields, flat for HSET, in the order both writers use: name, the timing
-- fields present, offset, opts and data when present, ic.
local function scheduler_hash_fields(s, offset, ic)
  local fields = {"name", s.name}
  for _, field in ipairs(TIMING_FIELDS) do
    if s[field] then
      fields[#fields + 1] = field
      fields[#fields + 1] = s[field]
    end
  end
  fields[#fields + 1] = "offset"
  fields[#fields + 1] = offset
  if s.opts then
    fields[#fields + 1] = "opts"
    fields[#fields + 1] = s.opts
  end
  if s.data then
    fields[#fields + 1] = "data"
    fields[#fields + 1] = s.data
  end
  fields[#fields + 1] = "ic"
  fields[#fields + 1] = ic
  return fields
end

local function iteration_id(scheduler_id, millis)
  return "repeat:" .. scheduler_id .. ":" .. fmt(millis)
end

-- Where an iteration waits: "delayed", "waiting" or "prioritized" while it is pending, "active"
-- while a worker has it, or nil (finished or gone).
local function iteration_state(job_id)
  if rcall("ZSCORE", K_DELAYED, job_id) then
    return "delayed"
  end
  if rcall("LPOS", K_WAIT, job_id) then
    return "waiting"
  end
  if rcall("ZSCORE", K_PRIORITIZED, job_id) then
    return "prioritized"
  end
  if rcall("LPOS", K_ACTIVE, job_id) then
    return "active"
  end
  return nil
end

local function is_pending(state)
  return state == "delayed" or state == "waiting" or state == "prioritized"
end

-- Take a pending iteration out of its state and delete it.
local function drop_pending(prefix, job_id, state)
  if state == "delayed" then
    rcall("ZREM", K_DELAYED, job_id)
  elseif state == "waiting" then
    rcall("LREM", K_WAIT, 0, job_id)
  else
    rcall("ZREM", K_PRIORITIZED, job_id)
  end
  delete_job(prefix .. job_id)
end

-- Create the iteration of `scheduler_id` that runs at `millis`, from the scheduler hash `s`
-- (a table of its fields). `count` is its opts.repeat.count. Iterations after the first get
-- opts.attempts = 0 when the template has none, as Node's workers write them.
-- Returns the job id, or nil when a job with that id exists already (so creating the same
-- iteration twice creates it once).
local function create_iteration(prefix, scheduler_id, millis, now, count, s, later, max_len)
  local job_id = iteration_id(scheduler_id, millis)
  local job_key = prefix .. job_id
  if rcall("EXISTS", job_key) == 1 then
    return nil
  end
  -- K:id counts scheduler iterations too, as BullMQ's add does.
  rcall("INCR", K_ID)
  local opts = {}
  if s.opts and s.opts ~= "" then
    opts = cjson.decode(s.opts)
  end
  local rep = {count = count}
  if s.every then
    rep.every = tonumber(s.every)
  else
    rep.pattern = s.pattern
  end
  if s.tz then
    rep.tz = s.tz
  end
  if s.startDate then
    rep.startDate = tonumber(s.startDate)
  end
  if s.endDate then
    rep.endDate = tonumber(s.endDate)
  end
  if s.limit then
    rep.limit = tonumber(s.limit)
  end
  local delay = math.max(0, millis - now)
  opts.repeatJobKey = scheduler_id
  opts.jobId = job_id
  opts["repeat"] = rep
  opts.timestamp = now
  opts.delay = delay
  if s.pattern then
    opts.prevMillis = millis
  end
  if later and opts.attempts == nil then
    opts.attempts = 0
  end
  local priority = tonumber(opts.priority) or 0
  rcall("HSET", job_key, "name", s.name or scheduler_id, "data", s.data or "{}",
    "opts", cjson.encode(opts), "timestamp", fmt(now), "delay", fmt(delay),
    "priority", fmt(priority), "rjk", scheduler_id)
  rcall("HSETNX", K_META, "opts.maxLenEvents", max_len)
  emit(max_len, "added", "jobId", job_id, "name", s.name or scheduler_id)
  if delay > 0 then
    schedule_delayed(job_id, millis, max_len)
  else
    make_ready(job_id, priority, opts.lifo == true, max_len, nil)
  end
  return job_id
end

-- The scheduler hash as a table of its fields ({} when there is none).
local function read_scheduler(scheduler_key)
  local flat = rcall("HGETALL", scheduler_key)
  local s = {}
  for i = 1, #flat, 2 do
    s[flat[i]] = flat[i + 1]
  end
  return s
end
