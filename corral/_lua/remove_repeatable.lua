-- remove_repeatable: delete a repeatable job as BullMQ 4 and 5 wrote it (their
-- removeRepeatableByKey), or any other K:repeat entry by its key.
--
-- Removes the key from K:repeat, deletes K:repeat:<key> (BullMQ 5's hash, or a job scheduler's)
-- unless that is a job's hash, and deletes the pending run: a delayed job whose rjk is the key,
-- due at the entry's score (its id is repeat:<some md5>:<run ms>, and the md5 is not always the
-- key, so it is found by its score's millisecond: delayed scores are run ms * 4096 + seq), with
-- a `removed{jobId, prev: "delayed"}` event. A run already waiting or active is left to run,
-- as BullMQ 5 left it.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses delayed, events, meta.
--       K:repeat and the entry and job hashes are ARGV[1] .. suffix.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] the entry's key (its K:repeat member)
-- Returns 1 when K:repeat had the key, else 0 (and then nothing is deleted).
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores
-- @include remove

local prefix = ARGV[1]
local key = ARGV[2]
local repeat_key = prefix .. "repeat"
local score = rcall("ZSCORE", repeat_key, key)
if not score then
  return 0
end
rcall("ZREM", repeat_key, key)
local hash_key = repeat_key .. ":" .. key
-- A 4.x key holds colons: K:repeat:<key> might then be some iteration's job hash.
if rcall("HEXISTS", hash_key, "rjk") == 0 then
  rcall("DEL", hash_key)
end
local base = tonumber(score) * 4096
local max_len = events_max_len()
for _, job_id in ipairs(rcall("ZRANGEBYSCORE", K_DELAYED, fmt(base), fmt(base + 4095))) do
  if rcall("HGET", prefix .. job_id, "rjk") == key then
    rcall("ZREM", K_DELAYED, job_id)
    delete_job(prefix .. job_id)
    emit(max_len, "removed", "jobId", job_id, "prev", "delayed")
  end
end
return 1
