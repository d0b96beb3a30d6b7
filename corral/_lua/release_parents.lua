-- release_parents: close a flow's transaction, or one chunk of a flow written in chunks
-- (corral's; BullMQ writes a flow in one call).
--
-- A parent of a flow waits in waiting-children for its :dependencies to empty. Two things can
-- leave it waiting for ever, and this script, run last in the same MULTI as the adds, covers
-- both:
-- * a child that was not created (deduplicated, an idempotency key's hit, a job id that exists
--   already) never joins :dependencies, so a parent whose children all went that way has none
--   pending and no completion will ever release it: it is released here, as a last child's
--   completion releases it (include/parent.lua);
-- * a flow written in chunks: a parent whose children are still to come in later chunks must
--   not run when the children written so far complete. It gets a marker in :dependencies, the
--   member KEYS[2] .. ":" (a key that never exists, and never a job key: its last part, where a
--   job key has its job id, is empty), which no completion removes; the chunk that writes its
--   last child removes the marker and releases it if nothing else is pending. Node BullMQ
--   releases a parent only when :dependencies is empty, so it waits for the marker too.
-- While parents are marked, the flow is listed in KEYS[1] (so that an operator can release
-- the parents of a producer that died mid-flow), and its marked parents in KEYS[2].
--
-- KEYS[1] the flows being added in chunks, `<K>:x-flow:adding` (K: the first root's queue):
--         hash, flow id -> record JSON
-- KEYS[2] this flow's marked parents, `<K>:x-flow:<flow id>`: set of full job keys
-- ARGV[1] now (epoch ms): a released parent with a `delay` runs that long after it
-- ARGV[2] the flow id, or "" for a flow written in one transaction (no markers, no record)
-- ARGV[3] the record JSON kept under the flow id while some parent is marked ("" keeps it as it
--         is)
-- ARGV[4] m, how many parents to mark
-- ARGV[5..4+m] full keys of parents to mark: written in this call, their children continue in
--         later chunks. Only a parent in waiting-children is marked (a job id that existed
--         already, and is not waiting for children, is left alone).
-- ARGV[5+m..] full keys of parents whose children are all written now: their marker (if any)
--         goes, and each one with no pending child left is released.
-- Returns {parents marked, parents released}. Sent again (a lost reply), it does the same
-- work again harmlessly: marks are set members, and a released parent is not released twice.
-- Error codes: none.
local rcall = redis.call
-- @include scores
-- @include parent

local now = tonumber(ARGV[1])
local flow_id = ARGV[2]
local marker = KEYS[2] .. ":"
local m = tonumber(ARGV[4])

local marked = 0
for i = 5, 4 + m do
  local parent_key = ARGV[i]
  local qp, parent_id = split_job_key(parent_key)
  if rcall("ZSCORE", qp .. "waiting-children", parent_id) then
    rcall("SADD", parent_key .. ":dependencies", marker)
    rcall("SADD", KEYS[2], parent_key)
    marked = marked + 1
  end
end

local released = 0
for i = 5 + m, #ARGV do
  local parent_key = ARGV[i]
  if flow_id ~= "" then
    rcall("SREM", parent_key .. ":dependencies", marker)
    rcall("SREM", KEYS[2], parent_key)
  end
  if rcall("SCARD", parent_key .. ":dependencies") == 0 and release_parent(parent_key, now) then
    released = released + 1
  end
end

if flow_id ~= "" then
  if rcall("SCARD", KEYS[2]) == 0 then
    rcall("HDEL", KEYS[1], flow_id)
  elseif ARGV[3] ~= "" then
    rcall("HSET", KEYS[1], flow_id, ARGV[3])
  end
end
return {marked, released}
