-- update_data: replace a job's data (BullMQ's updateData). No event, as in BullMQ.
--
-- The job's opts.sizeLimit, when set, bounds the data as it did at add: checked against the
-- stored opts before anything is written.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses none of them.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] data JSON
-- Returns 0.
-- Error codes: -1 job missing, {-10, sizeLimit} the data is over the job's sizeLimit bytes
-- (nothing was written).
-- @include keys

local job_key = ARGV[1] .. ARGV[2]
-- Checked in the script so a removed job is not brought back as a hash with only `data`.
if rcall("EXISTS", job_key) == 0 then
  return -1
end
local opts = rcall("HGET", job_key, "opts")
if opts then
  local ok, decoded = pcall(cjson.decode, opts)
  local limit = ok and type(decoded) == "table" and tonumber(decoded.sizeLimit)
  if limit and #ARGV[3] > limit then
    return {-10, limit}
  end
end
rcall("HSET", job_key, "data", ARGV[3])
return 0
