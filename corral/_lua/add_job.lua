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
-- ARGV[13] deduplication id, or "" for none (BullMQ's opts.de; the job gets `deid`)
-- ARGV[14] deduplication ttl ms (0: until the job finishes)
-- ARGV[15] "1" to extend the ttl on a duplicate add   ARGV[16] "1" to replace a job that is
--          still delayed (debounce)                    ARGV[17] "1" for keep-last-if-active
-- ARGV[18] idempotency key, or "" (corral's: K:x-idem:<key>, field `x-idem` on the job)
-- ARGV[19] idempotency window ms
-- Returns {job id, 1} when the job was created; {job id, 0} when a job with that custom id
-- already existed (nothing is written but a `duplicated` event; it is not linked to the
-- parent); {kept job id, 3} when the deduplication id is held by another job (a
-- `deduplicated` event; with keep-last-if-active and the holder active, this add is kept in
-- K:dn:<id> to run after it); {first job id, 2, state, value, name} when the idempotency key
-- was used within its window (state "" while unfinished, else "completed" with the return
-- value or "failed" with the reason).
-- Error codes: -7 the parent does not exist (nothing is written, K:id is not counted).
-- @include keys
-- @include events
-- @include scores
-- @include remove

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

local idem_key = ARGV[18] or ""
local idem_record = prefix .. "x-idem:" .. idem_key
if idem_key ~= "" then
  local first = rcall("HMGET", idem_record, "jobId", "state", "value", "name")
  if first[1] then
    return {first[1], 2, first[2] or "", first[3] or "", first[4] or ""}
  end
end

if rcall("EXISTS", job_key) == 1 then
  emit(max_len, "duplicated", "jobId", job_id)
  return {job_id, 0}
end

local dedup_id = ARGV[13] or ""
local dedup_ttl = tonumber(ARGV[14]) or 0
local de_key = prefix .. "de:" .. dedup_id
if dedup_id ~= "" then
  local holder = rcall("GET", de_key)
  if holder and rcall("EXISTS", prefix .. holder) == 0 then
    holder = nil -- its job is gone: the id is free again
  end
  if holder then
    local holder_active = rcall("EXISTS", prefix .. holder .. ":lock") == 1
    if ARGV[17] == "1" and holder_active then
      -- Keep-last-if-active: this add waits in K:dn:<id>, replacing any earlier one, and
      -- becomes a job when the active one finishes (include/dedup.lua).
      rcall("HSET", prefix .. "dn:" .. dedup_id, "name", ARGV[3], "data", ARGV[4],
        "opts", ARGV[5], "jid", job_id)
      emit(max_len, "deduplicated", "jobId", holder, "deduplicationId", dedup_id,
        "deduplicatedJobId", job_id)
      return {holder, 3}
    end
    if ARGV[16] == "1" and rcall("ZSCORE", K_DELAYED, holder) then
      -- Debounce: the job still waiting for its delay gives way to this one.
      rcall("ZREM", K_DELAYED, holder)
      delete_job(prefix .. holder)
      emit(max_len, "removed", "jobId", holder, "prev", "delayed")
      emit(max_len, "deduplicated", "jobId", job_id, "deduplicationId", dedup_id,
        "deduplicatedJobId", holder)
    else
      if ARGV[15] == "1" and dedup_ttl > 0 then
        rcall("PEXPIRE", de_key, dedup_ttl)
      end
      emit(max_len, "deduplicated", "jobId", holder, "deduplicationId", dedup_id,
        "deduplicatedJobId", job_id)
      return {holder, 3}
    end
  end
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
if dedup_id ~= "" then
  rcall("HSET", job_key, "deid", dedup_id)
  if dedup_ttl > 0 then
    rcall("SET", de_key, job_id, "PX", dedup_ttl)
  else
    rcall("SET", de_key, job_id)
  end
end
if idem_key ~= "" then
  rcall("HSET", job_key, "x-idem", idem_key)
  rcall("HSET", idem_record, "jobId", job_id, "name", ARGV[3])
  rcall("PEXPIRE", idem_record, ARGV[19])
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
