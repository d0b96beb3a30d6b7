-- move_to_finished: end one attempt of an active job (completed, failed, or retry), then
-- optionally take the worker's next jobs in the same call (fetch-next).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, active,
--       prioritized, pc, delayed, completed, failed, marker, events, meta, stalled.
-- ARGV[1]  key prefix of the queue's jobs ("bull:q:")
-- ARGV[2]  job id                 ARGV[3]  lock token ("0" skips the lock check)
-- ARGV[4]  now (epoch ms)
-- ARGV[5]  outcome: "completed", "failed" (final) or "retry" (failed, more attempts left)
-- ARGV[6]  returnvalue JSON (completed) or failedReason (failed, retry)
-- ARGV[7]  the whole new stacktrace JSON array (failed, retry), or ""
-- ARGV[8]  retention, keep count: -1 keep all, 0 remove now, n keep the newest n
-- ARGV[9]  retention, max age ms: -1 none
-- ARGV[10] retry delay ms (retry only): > 0 goes to delayed, 0 straight back to wait
-- ARGV[11..18] fetch next, as in move_to_active.lua's ARGV[3..10] (count 0: none)
-- ARGV[19] metrics: data points to keep per minute series (0: no metrics), BullMQ's
--          maxDataPoints
-- ARGV[20] the worker's dead-letter queue, or "" (or absent): where a job failed for good
--          goes when its opts name none (include/dead_letter.lua)
-- A finished job (completed, or failed for good) frees its deduplication id, starts the add
-- kept by keep-last-if-active, and records its outcome for its idempotency key
-- (include/dedup.lua).
-- A flow child (a job with `parentKey`) also updates its parent, which may be in another
-- queue (include/parent.lua): completed -> no longer pending, return value in the parent's
-- :processed; failed for good -> by its failure policy (fpof, cpof, idof, rdof or none). A
-- parent left with no pending child is released to wait/prioritized/delayed with an event on
-- its own queue; this happens before the child's own `completed`/`failed` event, as BullMQ
-- writes them. A retry leaves the parent alone.
-- A finish that leaves nothing waiting, prioritized, delayed or active emits `drained`, as
-- BullMQ 6.7.0 does (include/finish.lua).
-- Returns {0, attempts_made, wake, taken, id1, token1, fields1, ...}, wake as in
-- move_to_active.lua
-- Error codes (first element): -1 job missing, -2 lock missing, -6 lock held by another
-- token, -3 job not in active.
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
local now = tonumber(ARGV[4])
dead_letter_default = ARGV[20] or ""
local max_len = events_max_len()
local attempts_made = finish_job(prefix, ARGV[2], ARGV[3], now, ARGV[5], ARGV[6], ARGV[7],
  tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[19]) or 0, max_len)
if attempts_made < 0 then
  return {attempts_made}
end

local out = {0, attempts_made, 0, 0}
local spec = fetch_spec(11)
if spec.count > 0 then
  promote_delayed(prefix, now, max_len)
  local taken, limit_ttl = take_jobs(out, prefix, now, spec, max_len)
  out[4] = taken
  if taken == 0 then
    out[3] = wake_hint(limit_ttl, prefix, now)
  end
end
if out[4] == 0 then
  emit_drained_if_empty(max_len)
end
return out
