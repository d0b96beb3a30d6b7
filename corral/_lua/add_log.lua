-- add_log: append one line to a job's log list, keeping only the newest keepLogs lines.
--
-- Everything that can refuse the call is checked before the first write, and the trim runs
-- only when the list is longer than keepLogs, so its index is always a small exact integer.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses none of them.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] the log line
-- ARGV[4] keepLogs: how many lines to keep (an integer >= 0), or "" to keep them all
-- ARGV[5] the most bytes ARGV[3] may have (absent: no limit)
-- Returns the number of lines the log holds now.
-- Error codes: -1 job missing, -4 keepLogs is not an integer >= 0, {-10, limit} the line is
-- over ARGV[5] bytes (nothing was written for either).
-- @include keys

local job_key = ARGV[1] .. ARGV[2]
if rcall("EXISTS", job_key) == 0 then
  -- No orphan :logs list for a job that is gone (removed or never added).
  return -1
end
local keep = nil
if ARGV[4] ~= "" then
  keep = tonumber(ARGV[4])
  if not keep or keep ~= math.floor(keep) or keep < 0 then
    return -4
  end
end
local limit = tonumber(ARGV[5])
if limit and #ARGV[3] > limit then
  return {-10, limit}
end
local logs_key = job_key .. ":logs"
if keep == 0 then
  rcall("DEL", logs_key)
  return 0
end
local count = rcall("RPUSH", logs_key, ARGV[3])
if keep and count > keep then
  rcall("LTRIM", logs_key, count - keep, -1)
  return keep
end
return count
