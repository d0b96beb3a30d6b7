-- cancel_job: stop a job from any process (queue.cancel / job.cancel / `corral cancel`).
--
-- A job that waits to run (wait or the legacy paused list, delayed, prioritized,
-- waiting-children) leaves that list or zset and fails for good now, never retried whatever
-- its attempts: failedReason "cancelled: <reason>" ("cancelled" for an empty reason) and
-- everything a final failure at fetch writes (include/fetch.lua fail_for_good): parent told
-- by its failure policy, dedup id released, idempotency outcome, the dead-letter record when
-- its opts name a DLQ (x-dlq; include/dead_letter.lua), removeOnFail, and
-- `failed{jobId, failedReason, prev}` with prev the state it was in (waiting, delayed,
-- prioritized, waiting-children), so Node's QueueEvents sees it. It made no attempt: atm is
-- unchanged and no `retries-exhausted` is written.
-- An active job whose lock is held is its worker's to stop: the job hash gets `x-cancel` =
-- the reason, and {jobId, reason} (JSON) is published on the queue's cancel channel, which
-- every worker of the queue listens on. The worker holding it stops the processor and fails
-- the job; a worker that fetches a job carrying `x-cancel` fails it without running it.
-- An active job without a lock (its worker died, and no stall check recovered it yet) has
-- nobody to stop it: it leaves active (and the stalled set) and fails for good now, ending
-- the attempt it was in: atm + 1, `failed{prev: active}` then `retries-exhausted`, as a
-- stalled job failed at fetch.
--
-- One call: the zsets are looked up by ZSCORE, the active list is searched (one entry per
-- running job), and wait is searched once, from its right end (the oldest jobs) up to the
-- job: the newest of 1M waiting jobs costs one scan of the list, about 26 ms of server time
-- (tests/limits/test_cancel_limits.py).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, paused,
--       active, prioritized, delayed, waiting-children, completed, failed, events, meta,
--       stalled (and marker, pc, via a released parent or dedup successor).
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] reason text ("" for none)
-- ARGV[4] now (epoch ms)
-- ARGV[5] the queue's cancel channel (corral._keys.QueueKeys.cancel_channel)
-- Returns 1 when the job failed now, 2 when its worker was asked to stop it.
-- Error codes: -1 job missing, -9 job already completed or failed, -8 the job is the pending
-- iteration of a job scheduler (remove the scheduler instead, as remove_job.lua says), -4
-- the job is in no list or zset of its queue (nothing to cancel).
-- @include keys
-- @include events
-- @include scores
-- @include remove
-- @include parent
-- @include dedup
-- @include dead_letter
-- @include fetch

local prefix = ARGV[1]
local job_id = ARGV[2]
local reason = ARGV[3]
local now = tonumber(ARGV[4])
local job_key = prefix .. job_id
if rcall("EXISTS", job_key) == 0 then
  return -1
end
if rcall("ZSCORE", K_COMPLETED, job_id) or rcall("ZSCORE", K_FAILED, job_id) then
  return -9
end
local scheduler = rcall("HGET", job_key, "rjk")
if scheduler then
  -- A scheduler makes its next iteration when this one starts: a pending iteration that
  -- failed now would stop the scheduler without a word, as a removed one would.
  local next_run = rcall("ZSCORE", prefix .. "repeat", scheduler)
  if next_run and job_id == "repeat:" .. scheduler .. ":" .. next_run then
    return -8
  end
end

local failed_reason = "cancelled"
if reason ~= "" then
  failed_reason = "cancelled: " .. reason
end

-- The states kept in zsets, with the name the `failed` event gives as prev.
local ZSETS = {
  {K_DELAYED, "delayed"},
  {K_PRIORITIZED, "prioritized"},
  {K_WAITING_CHILDREN, "waiting-children"},
}
for _, state in ipairs(ZSETS) do
  if rcall("ZREM", state[1], job_id) == 1 then
    fail_for_good(prefix, job_id, job_key, failed_reason, state[2], false, now,
      events_max_len())
    return 1
  end
end

if rcall("LPOS", K_ACTIVE, job_id) then
  if rcall("EXISTS", job_key .. ":lock") == 1 then
    -- A worker runs it: only that worker can stop the processor, and it fails the job then.
    rcall("HSET", job_key, "x-cancel", reason)
    rcall("PUBLISH", ARGV[5], cjson.encode({jobId = job_id, reason = reason}))
    return 2
  end
  rcall("LREM", K_ACTIVE, -1, job_id)
  rcall("SREM", K_STALLED, job_id)
  fail_for_good(prefix, job_id, job_key, failed_reason, "active", true, now, events_max_len())
  return 1
end

-- Workers pop wait's right end, so a job waiting longest is found soonest from there.
-- K:paused holds ids only in data written by BullMQ < 5; a job there is waiting too.
if rcall("LREM", K_WAIT, -1, job_id) == 1 or rcall("LREM", K_PAUSED, -1, job_id) == 1 then
  fail_for_good(prefix, job_id, job_key, failed_reason, "waiting", false, now, events_max_len())
  return 1
end
return -4
