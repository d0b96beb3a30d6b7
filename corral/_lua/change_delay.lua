-- change_delay: reschedule a delayed job to run `delay` ms from now (BullMQ's changeDelay).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses delayed, marker,
--       events, meta.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] now (epoch ms)
-- ARGV[4] new delay ms (>= 0), counted from now
-- Returns the new runAt (epoch ms).
-- Error codes: -1 job missing, -4 job not delayed.
-- @include keys
-- @include events
-- @include scores

local job_id = ARGV[2]
local job_key = ARGV[1] .. job_id
if rcall("EXISTS", job_key) == 0 then
  return -1
end
if rcall("ZREM", K_DELAYED, job_id) == 0 then
  return -4
end
local run_at = tonumber(ARGV[3]) + tonumber(ARGV[4])
rcall("HSET", job_key, "delay", ARGV[4])
-- schedule_delayed also moves the "1" marker, which may have pointed at this job's old time.
schedule_delayed(job_id, run_at, events_max_len())
return run_at
