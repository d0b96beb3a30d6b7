-- add_job: create one job and queue it in wait, prioritized, delayed or waiting-children
-- (BullMQ 6.x layout).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, prioritized, pc,
--       delayed, waiting-children, marker, events, meta, id.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] custom job id, or "" to take the next value of K:id
-- ARGV[3] name          ARGV[4] data (JSON)        ARGV[5] opts (JSON, BullMQ's names)
-- ARGV[6] timestamp ms  ARGV[7] delay ms (>= 0)    ARGV[8] priority (0 = none)
-- ARGV[9] "1" for lifo, else "0"
-- ARGV[10] the parent's full key ("bull:pq:<id>", any queue of the prefix) or "" for none:
--          the job gets `parentKey` and `parent`, and joins the parent's :dependencies
-- ARGV[11] the `parent` field: JSON {"id", "queueKey"} plus its failure policy flag, or ""
-- ARGV[12] "1" for a flow parent: it waits in waiting-children (score = timestamp) for the
--          children added after it, with events `added`, `waiting-children`; else "0"
-- Returns {job id, 1} when the job was created, {job id, 0} when a job with that custom id
-- already existed (nothing is written but a `duplicated` event; it is not linked to the
-- parent).
-- Error codes: -7 the parent does not exist (nothing is written, K:id is not counted).
-- @include keys
-- @include events
-- @include scores

local prefix = ARGV[1]
local parent_key = ARGV[10] or ""
if parent_key ~= "" and rcall("EXISTS", parent_key) == 0 then
  return -7
end
-- K:id counts every add, custom ids and duplicates included, as BullMQ does.
local counter = rcall("INCR", K_ID)
local job_id = ARGV[2]
if job_id == "" then
  job_id = tostring(counter)
end
local job_key = prefix .. job_id
local max_len = events_max_len()

if rcall("EXISTS", job_key) == 1 then
  emit(max_len, "duplicated", "jobId", job_id)
  return {job_id, 0}
end

local timestamp = tonumber(ARGV[6])
local delay = tonumber(ARGV[7])
local priority = tonumber(ARGV[8])
rcall("HSET", job_key, "name", ARGV[3], "data", ARGV[4], "opts", ARGV[5], "timestamp", ARGV[6],
  "delay", ARGV[7], "priority", ARGV[8])
if parent_key ~= "" then
  rcall("HSET", job_key, "parentKey", parent_key, "parent", ARGV[11])
  rcall("SADD", parent_key .. ":dependencies", job_key)
end
rcall("HSETNX", K_META, "opts.maxLenEvents", max_len)
emit(max_len, "added", "jobId", job_id, "name", ARGV[3])

if ARGV[12] == "1" then
  rcall("ZADD", K_WAITING_CHILDREN, ARGV[6], job_id)
  emit(max_len, "waiting-children", "jobId", job_id)
elseif delay > 0 then
  schedule_delayed(job_id, timestamp + delay, max_len)
else
  make_ready(job_id, priority, ARGV[9] == "1", max_len, nil)
end
return {job_id, 1}
