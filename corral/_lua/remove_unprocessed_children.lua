-- remove_unprocessed_children: remove every pending child of a parent, each with the flow
-- below it (BullMQ's removeUnprocessedChildren), when all of it fits one call; a bigger set is
-- refused untouched (-9) and the caller removes it in bounded calls
-- (corral/_async/job_removal.py, remove_jobs.lua).
--
-- A child whose subtree holds an active job is kept (with that subtree), as remove_job.lua
-- would refuse it; the others go, children first, with `removed` events on their own queues.
-- When the last pending child goes, the parent is released to run (include/parent.lua), unless
-- it carries the mark of a flow still being added (its children to come are not removed). Every
-- subtree is read before anything is written, so a refusal for size writes nothing.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses none of them (the
--       children's keys come from the parent's :dependencies).
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id (the parent)
-- ARGV[3] at most this many jobs go in this call (absent: no limit, for callers that do not
--         chunk)
-- ARGV[4] at most this many list entries are searched (as remove_job.lua's ARGV[5])
-- Returns the number of jobs removed.
-- Error codes: -1 job missing, -9 over the budget (nothing was written: remove in chunks).
-- @include keys
-- @include events
-- @include scores
-- @include parent
-- @include remove_tree

local job_key = ARGV[1] .. ARGV[2]
if rcall("EXISTS", job_key) == 0 then
  return -1
end
local deps_key = job_key .. ":dependencies"
local budget = {jobs = tonumber(ARGV[3]) or math.huge, scan = tonumber(ARGV[4]) or math.huge}
if rcall("SCARD", deps_key) > budget.jobs then
  return -9
end
local dangling = {}
local trees = {}
local seen = {}
for _, child_key in ipairs(rcall("SMEMBERS", deps_key)) do
  if string.sub(child_key, -1) == ":" then
    -- Not a child: the mark of a flow still being added in chunks (release_parents.lua), which
    -- keeps the parent waiting for the children to come. It stays.
  elseif rcall("EXISTS", child_key) == 0 then
    dangling[#dangling + 1] = child_key
  else
    local tree = {}
    local verdict = collect_tree(child_key, true, tree, seen, budget)
    if verdict == "big" then
      return -9
    elseif not verdict then
      trees[#trees + 1] = tree
    end
  end
end
for _, child_key in ipairs(dangling) do
  -- A dependency whose job is gone would keep the parent waiting for ever.
  rcall("SREM", deps_key, child_key)
end
if #dangling > 0 then
  release_if_done(job_key, nil)
end
local removed = 0
for _, tree in ipairs(trees) do
  remove_collected(tree, seen)
  removed = removed + #tree
end
return removed
