-- pause_queue: pause or resume the whole queue (BullMQ 6.x: only meta.paused changes).
--
-- Pausing leaves wait as it is (6.x no longer renames wait to paused): every fetch reads
-- meta.paused and takes nothing while it is set, adds stop writing the marker, and the marker
-- is deleted (both members), as BullMQ 6.7.0 does. Resuming
-- writes the markers a paused queue skipped, so blocked workers wake up at once: "0" when
-- work is ready or a job is parked (include/parked.lua), "1" at the earliest delayed job.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, prioritized,
--       delayed, marker, events, meta; and K:x-parked.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:"; for corral's parked jobs)
-- ARGV[2] "pause" or "resume"
-- Returns 0.
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores
-- @include parked

local max_len = events_max_len()
if ARGV[2] == "pause" then
  rcall("HSET", K_META, "paused", 1)
  -- As BullMQ 6.7.0 does: no marker is left to wake a worker into a fetch that takes nothing.
  rcall("DEL", K_MARKER)
  emit(max_len, "paused")
else
  rcall("HDEL", K_META, "paused")
  -- A parked job's due time was in the marker the pause deleted: a fetch finds it again.
  if rcall("LLEN", K_WAIT) > 0 or rcall("ZCARD", K_PRIORITIZED) > 0
      or rcall("ZCARD", parked_key(ARGV[1])) > 0 then
    rcall("ZADD", K_MARKER, 0, "0")
  end
  mark_next_delayed()
  emit(max_len, "resumed")
end
return 0
