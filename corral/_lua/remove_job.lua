-- remove_job: delete a job that is not being processed, and (optionally) its flow children,
-- when all of it fits one call; a bigger tree is refused untouched (-9) and the caller removes
-- it in bounded calls (corral/_async/job_removal.py, remove_jobs.lua).
--
-- All-or-nothing: the tree is read first, within the budget of ARGV[4] jobs and ARGV[5] list
-- entries to search, and if the job or any job below it is active (in active or holding a
-- lock) nothing at all is written. Then children go before their parents, each with a
-- `removed{jobId, prev}` event on its own queue's stream. A parent outside the removal that is
-- left with no pending child is released to run, as when its last child completes
-- (include/parent.lua).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); the job's own queue keys
--       are reached as ARGV[1] .. suffix (include/remove_tree.lua), like its children's.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] "1" to remove the children too, else "0"
-- ARGV[4] at most this many jobs go in this call (default 500)
-- ARGV[5] at most this many list entries are searched in this call (default 250000): each job
--         in no zset costs the length of its queue's wait and paused lists, each job the
--         length of its queue's active list
-- Returns the number of jobs removed.
-- Error codes: -1 job missing, -5 the job or one of its children is active, -8 the job is
-- the pending iteration of a job scheduler (remove the scheduler instead, as BullMQ says),
-- -9 the tree is over the budget (nothing was written: remove it in chunks).
-- @include keys
-- @include events
-- @include scores
-- @include parent
-- @include remove_tree

local job_key = ARGV[1] .. ARGV[2]
if rcall("EXISTS", job_key) == 0 then
  return -1
end
local scheduler = rcall("HGET", job_key, "rjk")
if scheduler then
  local next_run = rcall("ZSCORE", ARGV[1] .. "repeat", scheduler)
  if next_run and ARGV[2] == "repeat:" .. scheduler .. ":" .. next_run then
    return -8
  end
end
local budget = {jobs = tonumber(ARGV[4]) or 500, scan = tonumber(ARGV[5]) or 250000}
local tree = {}
local seen = {}
local verdict = collect_tree(job_key, ARGV[3] == "1", tree, seen, budget)
if verdict == "active" then
  return -5
elseif verdict == "big" then
  return -9
end
remove_collected(tree, seen)
return #tree
