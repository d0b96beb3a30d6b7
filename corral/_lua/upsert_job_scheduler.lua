-- upsert_job_scheduler: create or replace a job scheduler and its pending iteration, atomically.
--
-- One script, so any number of processes may upsert the same scheduler at once and it still
-- has exactly one pending iteration. The hash K:repeat:<id> is rewritten (ic is kept), and
-- K:repeat scores the scheduler at the run time of its pending iteration. Which run that is
-- follows BullMQ 6.7.0 as observed:
-- * same timing (every, pattern, tz, startDate) and an iteration still pending: it keeps its
--   run time and id, and is rewritten from the new template (opts.repeat.count back to 1);
-- * same timing and the current iteration active: it is left to its worker, which creates the
--   next one; nothing else is created;
-- * same timing and no iteration left (limit or endDate reached): a new one at ARGV[5];
-- * a new scheduler, or new timing: a pending iteration is removed, a new one runs at ARGV[4].
-- offset (every: run ms mod every; cron: 0) is kept when a pending iteration was replaced.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, active,
--       prioritized, pc, delayed, marker, events, meta, id. K:repeat and the scheduler and
--       job hashes are ARGV[1] .. suffix.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] scheduler id
-- ARGV[3] now (epoch ms)
-- ARGV[4] first run (epoch ms) of a new scheduler or of new timing
-- ARGV[5] run (epoch ms) when the timing is unchanged but no iteration is left
-- ARGV[6] template job name   ARGV[7] template data JSON, or ""   ARGV[8] template opts JSON,
--         or ""
-- ARGV[9..14] the timing fields tz, limit, pattern, startDate, endDate, every ("" = absent)
-- Returns {job id of the pending iteration ("" when none was made), its run time (ms)}.
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores
-- @include remove
-- @include scheduler

local prefix = ARGV[1]
local scheduler_id = ARGV[2]
local now = tonumber(ARGV[3])
local repeat_key = prefix .. "repeat"
local scheduler_key = repeat_key .. ":" .. scheduler_id
local max_len = events_max_len()

local new = scheduler_from_args(6, 9)

local old = read_scheduler(scheduler_key)
local exists = old.ic ~= nil
local same = exists
for _, name in ipairs({"every", "pattern", "tz", "startDate"}) do
  if old[name] ~= new[name] then
    same = false
  end
end

local score = rcall("ZSCORE", repeat_key, scheduler_id)
local current, state
if score then
  current = iteration_id(scheduler_id, tonumber(score))
  state = iteration_state(current)
end

local millis, create, keep_offset
if same and score and is_pending(state) then
  millis, create, keep_offset = tonumber(score), true, true
  drop_pending(prefix, current, state)
elseif same and score and state == "active" then
  millis, create, keep_offset = tonumber(score), false, true
elseif same then
  millis, create, keep_offset = tonumber(ARGV[5]), true, false
else
  millis, create, keep_offset = tonumber(ARGV[4]), true, false
  if score and is_pending(state) then
    drop_pending(prefix, current, state)
    keep_offset = exists
  end
end

local offset = "0"
if keep_offset and old.offset then
  offset = old.offset
elseif new.every then
  offset = fmt(millis % tonumber(new.every))
end

rcall("DEL", scheduler_key)
local fields = scheduler_hash_fields(new, offset, old.ic or 1)
rcall("HSET", scheduler_key, unpack(fields))
rcall("ZADD", repeat_key, fmt(millis), scheduler_id)

local job_id = ""
if create and not (new.endDate and millis > tonumber(new.endDate)) then
  job_id = create_iteration(prefix, scheduler_id, millis, now, 1, new, false, max_len) or ""
elseif not create then
  job_id = current
end
return {job_id, fmt(millis)}
