-- migrate_repeatable: turn a repeatable job written by BullMQ 4 or 5 into a job scheduler.
--
-- A legacy entry (a K:repeat member whose hash has no ic, or that has no hash) holds no job
-- data: an old worker copied name, data and options from the run it took into the next. The
-- caller read them from a run (corral._async.queue_repeatable) and passes them here with the
-- entry's timing; this writes the scheduler hash K:repeat:<id> (template name, data, opts, the
-- timing fields, offset, ic) and scores <id> in K:repeat at the same run time, so any 6.x
-- worker, corral's or Node's, runs the schedule on with the job's data.
--   - <id> is the key itself for a BullMQ 5 key (no ':'), else (a BullMQ 4 key) the MD5 that
--     BullMQ 5 names the same options with; a 4.x key leaves K:repeat.
--   - ARGV[5] names the pending run (delayed, waiting or prioritized, rjk = key) to carry over:
--     when its id is not repeat:<id>:<run ms> it is replaced by that iteration (same run time,
--     data and options; a `removed` event for the old one). "" when a worker has just taken
--     the run (it is active): its caller then creates the next iteration as for any scheduler.
-- Nothing is written unless the entry is still at the run time read, still legacy, and the
-- named run still pending: two processes migrating the same entry migrate it once.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, active,
--       prioritized, pc, delayed, marker, events, meta, id. K:repeat and the scheduler and
--       job hashes are ARGV[1] .. suffix.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] the legacy entry's key
-- ARGV[3] the id of the scheduler to make
-- ARGV[4] the entry's run time (epoch ms: its K:repeat score) the caller read
-- ARGV[5] the pending run to carry over, or ""
-- ARGV[6] now (epoch ms)
-- ARGV[7] template name
-- ARGV[8] template data JSON ("" = none)
-- ARGV[9] template opts JSON ("" = none)
-- ARGV[10] ic: runs made so far (the count of the run read)
-- ARGV[11..16] the timing fields tz, limit, pattern, startDate, endDate, every ("" = absent)
-- Returns 1 when the scheduler was made, 0 when there was nothing to do, -1 when the id is
-- another scheduler's already (nothing written).
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores
-- @include remove
-- @include scheduler

local prefix = ARGV[1]
local key = ARGV[2]
local scheduler_id = ARGV[3]
local millis = tonumber(ARGV[4])
local run = ARGV[5]
local repeat_key = prefix .. "repeat"
local score = rcall("ZSCORE", repeat_key, key)
if not score or tonumber(score) ~= millis then
  return 0
end
local old_key = repeat_key .. ":" .. key
if rcall("HEXISTS", old_key, "ic") == 1 then
  return 0
end
local state
if run ~= "" then
  state = iteration_state(run)
  if not is_pending(state) or rcall("HGET", prefix .. run, "rjk") ~= key then
    return 0
  end
end
local scheduler_key = repeat_key .. ":" .. scheduler_id
if scheduler_id ~= key then
  if rcall("EXISTS", scheduler_key) == 1 or rcall("ZSCORE", repeat_key, scheduler_id) then
    return -1
  end
  rcall("ZREM", repeat_key, key)
  if rcall("HEXISTS", old_key, "rjk") == 0 then
    rcall("DEL", old_key)
  end
end

local s = scheduler_from_args(7, 11)
local offset = s.every and fmt(millis % tonumber(s.every)) or "0"
local fields = scheduler_hash_fields(s, offset, ARGV[10])
rcall("DEL", scheduler_key)
rcall("HSET", scheduler_key, unpack(fields))
rcall("ZADD", repeat_key, fmt(millis), scheduler_id)

if run ~= "" and run ~= iteration_id(scheduler_id, millis) then
  local max_len = events_max_len()
  drop_pending(prefix, run, state)
  emit(max_len, "removed", "jobId", run, "prev", state)
  create_iteration(prefix, scheduler_id, millis, tonumber(ARGV[6]), tonumber(ARGV[10]), s, true,
    max_len)
end
return 1
