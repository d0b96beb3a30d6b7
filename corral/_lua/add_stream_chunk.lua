-- add_stream_chunk: append one partial result to a job's stream (corral's K:<id>:x-stream),
-- keeping about the newest max_len entries, and set the stream to expire ttl after it.
--
-- One script rather than a plain XADD: the job is checked first, so a job that is gone
-- (removed, or never added) gets no orphan stream, and a job that has finished gets no chunk
-- after its end (consumers stop reading at the finish). Each entry carries the attempt that
-- wrote it (`ats`), so a consumer can tell a retry's chunks from the first run's. The expiry is
-- renewed at each append: the stream outlives its last chunk by ttl, whoever removes (or
-- never removes) the job; removing the job deletes it at once (include/remove.lua).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses none of them.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] the chunk, JSON
-- ARGV[4] max_len: the approximate cap of the stream (XADD MAXLEN ~), an integer >= 1
-- ARGV[5] ttl in ms (PEXPIRE), an integer >= 1
-- ARGV[6] the most bytes ARGV[3] may have
-- ARGV[7] the lock token of the attempt that streams; "0" skips the check (a job processed by
--         hand, without a lock)
-- Returns the entry's stream id ("<ms>-<seq>").
-- Error codes: -1 job missing, -9 the job has finished, -2 its lock is missing (the worker
-- lost it: the job may be running elsewhere by now), -6 the lock is another worker's,
-- {-10, limit} the chunk is over ARGV[6] bytes (nothing was written for any of them).
-- @include keys

local job_key = ARGV[1] .. ARGV[2]
if rcall("EXISTS", job_key) == 0 then
  return -1
end
local fields = rcall("HMGET", job_key, "finishedOn", "ats")
if fields[1] then
  return -9
end
-- A worker that lost its lock (stalled, then taken by another) must not write into the
-- stream of the attempt that runs now.
if ARGV[7] ~= "0" then
  local holder = rcall("GET", job_key .. ":lock")
  if not holder then
    return -2
  end
  if holder ~= ARGV[7] then
    return -6
  end
end
local limit = tonumber(ARGV[6])
if #ARGV[3] > limit then
  return {-10, limit}
end
local stream_key = job_key .. ":x-stream"
local id = rcall("XADD", stream_key, "MAXLEN", "~", ARGV[4], "*", "v", ARGV[3], "a",
  fields[2] or "0")
rcall("PEXPIRE", stream_key, ARGV[5])
return id
