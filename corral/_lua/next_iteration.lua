-- next_iteration: create a scheduler's next iteration once a worker has taken the current one.
--
-- The caller (corral._async.queue_schedulers.schedule_next_iteration) computes the next run
-- from the scheduler hash it read; this script writes it only if the taken iteration is still
-- the scheduler's current one (K:repeat scores it at ARGV[3]) and the timing fields are still
-- those the run was computed from. So a stalled iteration taken again, an iteration replaced
-- by an upsert, or a second call for the same iteration creates nothing: one pending
-- iteration per scheduler. The iteration is built from the hash as it is now (template name,
-- data and opts), gets opts.repeat.count = ARGV[6], and K:repeat and the hash's ic move on.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, prioritized, pc,
--       delayed, marker, events, meta, id. K:repeat and the scheduler and job hashes are
--       ARGV[1] .. suffix.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] scheduler id
-- ARGV[3] run time (epoch ms) of the iteration the worker took
-- ARGV[4] run time (epoch ms) of the next iteration
-- ARGV[5] now (epoch ms)
-- ARGV[6] opts.repeat.count of the next iteration
-- ARGV[7..12] the timing fields tz, limit, pattern, startDate, endDate, every the next run was
--         computed from ("" = absent)
-- Returns 1 when the iteration was created, 0 when there was nothing to do, -1 when the
-- scheduler's timing changed since it was read (read it again and retry).
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores
-- @include remove
-- @include scheduler

local prefix = ARGV[1]
local scheduler_id = ARGV[2]
local repeat_key = prefix .. "repeat"
local score = rcall("ZSCORE", repeat_key, scheduler_id)
if not score or tonumber(score) ~= tonumber(ARGV[3]) then
  return 0
end
local s = read_scheduler(repeat_key .. ":" .. scheduler_id)
if s.ic == nil then
  return 0
end
for i, name in ipairs(TIMING_FIELDS) do
  if (s[name] or "") ~= ARGV[6 + i] then
    return -1
  end
end
local millis = tonumber(ARGV[4])
local max_len = events_max_len()
if not create_iteration(prefix, scheduler_id, millis, tonumber(ARGV[5]), tonumber(ARGV[6]), s,
    true, max_len) then
  return 0
end
rcall("ZADD", repeat_key, fmt(millis), scheduler_id)
rcall("HINCRBY", repeat_key .. ":" .. scheduler_id, "ic", 1)
return 1
