-- remove_unprocessed_children: remove every pending child of a parent, each with the flow
-- below it (BullMQ's removeUnprocessedChildren).
--
-- A child whose subtree holds an active job is kept (with that subtree), as remove_job.lua
-- would refuse it; the others go, children first, with `removed` events on their own queues.
-- When the last pending child goes, the parent is released to run (include/parent.lua).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses none of them (the
--       children's keys come from the parent's :dependencies).
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id (the parent)
-- Returns the number of jobs removed.
-- Error codes: -1 job missing.
-- @include keys
-- @include scores
-- @include remove
-- @include parent
-- @include remove_tree

local job_key = ARGV[1] .. ARGV[2]
if rcall("EXISTS", job_key) == 0 then
  return -1
end
local removed = 0
local deps_key = job_key .. ":dependencies"
for _, child_key in ipairs(rcall("SMEMBERS", deps_key)) do
  if rcall("EXISTS", child_key) == 0 then
    -- A dependency whose job is gone would keep the parent waiting for ever.
    rcall("SREM", deps_key, child_key)
    release_if_done(job_key, nil)
  end
  local tree = {}
  local removing = {}
  if not collect_tree(child_key, true, tree, removing) then
    for _, key in ipairs(tree) do
      remove_one(key, removing)
    end
    removed = removed + #tree
  end
end
return removed
