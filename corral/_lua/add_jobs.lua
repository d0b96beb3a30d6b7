-- add_jobs: add many jobs in one call, all or nothing (Queue.add_bulk).
--
-- Each job is added exactly as add_job.lua adds one (include/add.lua). The parents named by
-- the jobs are checked first: when one is missing, and no job earlier in the call creates it,
-- nothing at all is written. One script call is atomic, so no transaction is needed.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua), as add_job.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] n, the number of jobs
-- ARGV[3..] 18 values per job: add_job.lua's ARGV[2..19], in that order
-- Returns {reply1, ..., replyN}, each as add_job.lua returns it, or {-7, parent key} when a
-- parent is missing (nothing was written).
-- Error codes: -7 (see above).
-- @include keys
-- @include events
-- @include scores
-- @include remove
-- @include add

local prefix = ARGV[1]
local n = tonumber(ARGV[2])
local GROUP = 18
-- add_job's ARGV[2] (custom id) and ARGV[10] (parent key), at these offsets in a group.
local ID, PARENT = 0, 8
local created = {}
for i = 0, n - 1 do
  local a = 3 + i * GROUP
  local parent_key = ARGV[a + PARENT]
  if parent_key ~= "" and not created[parent_key] and rcall("EXISTS", parent_key) == 0 then
    return {-7, parent_key}
  end
  if ARGV[a + ID] ~= "" then
    created[prefix .. ARGV[a + ID]] = true
  end
end
local max_len = events_max_len()
local replies = {}
for i = 0, n - 1 do
  replies[i + 1] = add_one(prefix, 3 + i * GROUP, max_len)
end
return replies
