-- remove_job: delete a job that is not being processed, and (optionally) its flow children.
--
-- All-or-nothing: the whole tree is read first, and if the job or any job below it is
-- active (in active or holding a lock) nothing at all is written. Then children go before
-- their parents, each with a `removed{jobId, prev}` event on its own queue's stream. A parent
-- outside the removal that is left with no pending child is released to run, as when its
-- last child completes (include/parent.lua).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); the job's own queue keys
--       are reached as ARGV[1] .. suffix (include/remove_tree.lua), like its children's.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id
-- ARGV[3] "1" to remove the children too, else "0"
-- Returns the number of jobs removed.
-- Error codes: -1 job missing, -5 the job or one of its children is active, -8 the job is
-- the pending iteration of a job scheduler (remove the scheduler instead, as BullMQ says).
-- @include keys
-- @include scores
-- @include remove
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
local tree = {}
local removing = {}
if collect_tree(job_key, ARGV[3] == "1", tree, removing) then
  return -5
end
for _, key in ipairs(tree) do
  remove_one(key, removing)
end
return #tree
