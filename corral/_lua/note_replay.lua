-- note_replay: record on a dead-letter queue's job the job its replay added, both as the
-- field `x-replayed` (what replay reads, to replay a dead letter once) and as a log line
-- (what bull-board and `corral job` show).
--
-- The job may have been removed (purged) after the replay read it: then nothing is written,
-- so no field is left behind as a hash without a job.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses none of them.
-- ARGV[1] key prefix of the queue's jobs ("bull:dlq:")
-- ARGV[2] the DLQ job's id
-- ARGV[3] the id of the job the replay added
-- ARGV[4] the log line
-- Returns 1 when it was recorded, 0 when the job is gone.
-- Error codes: none.
-- @include keys

local job_key = ARGV[1] .. ARGV[2]
if rcall("EXISTS", job_key) == 0 then
  return 0
end
rcall("HSET", job_key, "x-replayed", ARGV[3])
rcall("RPUSH", job_key .. ":logs", ARGV[4])
return 1
