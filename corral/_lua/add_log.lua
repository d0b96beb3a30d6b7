-- add_log: append one line to a job's log list, keeping only the newest keepLogs lines.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses none of them.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] the log line
-- ARGV[4] keepLogs: how many lines to keep, or "" to keep them all
-- Returns the number of lines the log holds now.
-- Error codes: -1 job missing.
-- @include keys

local job_key = ARGV[1] .. ARGV[2]
if rcall("EXISTS", job_key) == 0 then
  -- No orphan :logs list for a job that is gone (removed or never added).
  return -1
end
local logs_key = job_key .. ":logs"
local count = rcall("RPUSH", logs_key, ARGV[3])
if ARGV[4] ~= "" then
  local keep = tonumber(ARGV[4])
  if keep <= 0 then
    rcall("DEL", logs_key)
    return 0
  end
  rcall("LTRIM", logs_key, -keep, -1)
  return math.min(count, keep)
end
return count
