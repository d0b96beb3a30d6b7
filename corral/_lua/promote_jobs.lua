-- promote_jobs: run a batch of delayed jobs now, earliest first: delayed -> wait or
-- prioritized, as promote_job.lua does it for one (BullMQ's promoteJobs).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, prioritized,
--       pc, delayed, marker, events, meta.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] at most this many jobs are moved by this call (1000 at most, whatever is asked: one
--         call must not hold the server for long)
-- Returns how many jobs were moved (fewer than ARGV[2]: none is left).
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores

local prefix = ARGV[1]
local ids = rcall("ZRANGE", K_DELAYED, 0, math.min(tonumber(ARGV[2]), 1000) - 1)
if #ids == 0 then
  return 0
end
rcall("ZREM", K_DELAYED, unpack(ids))
local max_len = events_max_len()
for _, job_id in ipairs(ids) do
  local job_key = prefix .. job_id
  if rcall("EXISTS", job_key) == 1 then
    local priority = tonumber(rcall("HGET", job_key, "priority")) or 0
    rcall("HSET", job_key, "delay", 0)
    make_ready(job_id, priority, false, max_len, "delayed")
  end
end
return #ids
