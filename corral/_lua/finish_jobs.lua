-- finish_jobs: end the attempts of several active jobs of one worker in one call, then take
-- its next jobs: the worker's batched form of move_to_finished, for when many of its jobs
-- finish at once. Each job is finished exactly as move_to_finished would (include/finish.lua);
-- one job's error code does not stop the others. A call that finished a job and leaves
-- nothing waiting, prioritized, delayed or active emits `drained` once (include/finish.lua).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua), as move_to_finished.
-- ARGV[1]  key prefix of the queue's jobs ("bull:q:")
-- ARGV[2]  now (epoch ms)
-- ARGV[3..10] the fetch of next jobs, as in move_to_active.lua's ARGV[3..10] (count 0: none)
-- ARGV[11] metrics: data points to keep per minute series (0: no metrics)
-- ARGV[12] n, the number of jobs to finish; then 8 values per job, from ARGV[13]:
--          job id, lock token, outcome ("completed", "failed", "retry"), returnvalue JSON or
--          failedReason, stacktrace JSON or "", retention keep count, retention max age ms,
--          retry delay ms -- as move_to_finished.lua's ARGV[2], [3], [5]..[10]
-- ARGV[13 + 8n] the worker's dead-letter queue, or "" (or absent): where a job failed for
--          good goes when its opts name none (include/dead_letter.lua)
-- Returns {wake, taken, result1..resultN, id1, token1, fields1, ...}: result i is job i's
-- attempts made, or its error code (-1 job missing, -2 lock missing, -6 lock held by another
-- token, -3 not active); wake and the fetched triples as in move_to_active.lua.
-- Error codes: none for the call as a whole.
-- @include keys
-- @include events
-- @include scores
-- @include remove
-- @include parent
-- @include dedup
-- @include dead_letter
-- @include parked
-- @include fetch
-- @include finish

local prefix = ARGV[1]
local now = tonumber(ARGV[2])
local metrics_points = tonumber(ARGV[11]) or 0
local n = tonumber(ARGV[12])
dead_letter_default = ARGV[13 + n * 8] or ""
local max_len = events_max_len()
local out = {0, 0}
local finished = false
for i = 0, n - 1 do
  local a = 13 + i * 8
  out[3 + i] = finish_job(prefix, ARGV[a], ARGV[a + 1], now, ARGV[a + 2], ARGV[a + 3],
    ARGV[a + 4], tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7]),
    metrics_points, max_len)
  finished = finished or out[3 + i] >= 0
end
local spec = fetch_spec(3)
if spec.count > 0 then
  promote_delayed(prefix, now, max_len)
  local taken, limit_ttl = take_jobs(out, prefix, now, spec, max_len)
  out[2] = taken
  if taken == 0 then
    out[1] = wake_hint(limit_ttl, prefix, now)
  end
end
if out[2] == 0 and finished then
  emit_drained_if_empty(max_len)
end
return out
