-- remove_child_dependency: a child leaves its parent before it finishes (BullMQ's
-- removeChildDependency); the child itself stays where it is, as an ordinary job.
--
-- The child loses `parentKey` and `parent` and leaves the parent's :dependencies; a parent
-- left with no pending child is released as after a completion (include/parent.lua).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses none of them (the
--       parent's keys come from `parentKey`).
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] job id (the child)
-- ARGV[3] now (epoch ms)
-- Returns 1 when the child was a pending dependency and is not any more, 0 when it has no
-- parent or is no longer pending (nothing is written).
-- Error codes: -1 job missing.
-- @include keys
-- @include scores
-- @include parent

local job_key = ARGV[1] .. ARGV[2]
if rcall("EXISTS", job_key) == 0 then
  return -1
end
local parent_key = rcall("HGET", job_key, "parentKey")
if not parent_key or rcall("SREM", parent_key .. ":dependencies", job_key) == 0 then
  return 0
end
rcall("HDEL", job_key, "parentKey", "parent")
if rcall("EXISTS", parent_key) == 1 then
  release_if_done(parent_key, tonumber(ARGV[3]))
end
return 1
