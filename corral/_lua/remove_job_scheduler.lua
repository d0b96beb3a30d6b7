-- remove_job_scheduler: delete a job scheduler and its pending iteration.
--
-- Removes the id from K:repeat, deletes K:repeat:<id>, and deletes the pending iteration
-- (delayed, waiting or prioritized) with a `removed{jobId, prev}` event. Node BullMQ 6.7.0
-- was seen to remove only a delayed one; corral also removes one that is already due, so no
-- run starts after the removal. An active iteration runs to its end; its worker then finds
-- no scheduler and creates nothing more.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, active,
--       prioritized, delayed, events, meta. K:repeat and the scheduler and job hashes are
--       ARGV[1] .. suffix.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] scheduler id
-- Returns 1 when there was such a scheduler, else 0. An id K:repeat does not list that holds a
-- ':' deletes nothing: K:repeat:<id> is then another scheduler's iteration (a job hash).
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
local found = 0
-- K:repeat:<id> is deleted when the id is a scheduler's; without a ':' it can be nothing else
-- (a hash left without its K:repeat entry). An id with one, "a:1700000000000", that K:repeat
-- does not list names the hash of scheduler a's iteration: that is not deleted.
if score or not string.find(scheduler_id, ":", 1, true) then
  found = rcall("DEL", repeat_key .. ":" .. scheduler_id)
end
if score then
  found = 1
  rcall("ZREM", repeat_key, scheduler_id)
  local job_id = iteration_id(scheduler_id, tonumber(score))
  local state = iteration_state(job_id)
  if is_pending(state) then
    drop_pending(prefix, job_id, state)
    emit(events_max_len(), "removed", "jobId", job_id, "prev", state)
  end
end
return found
