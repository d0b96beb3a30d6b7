-- inspect_jobs: what removing some jobs needs to know of them, read in one step; writes
-- nothing. The reading half of a removal in chunks (corral/_async/job_removal.py): the caller
-- walks a tree with it, a bounded number of keys per call.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses none of them (the
--       jobs may belong to several queues).
-- ARGV: full job keys (the caller sends at most 1000)
-- Returns five values per key: its state ("" the job is gone, "locked" it holds a lock, the
-- name of the zset that holds it, or "list": in no zset, so in a list of its queue or in no
-- place), then how many keys its :dependencies, :processed, :failed and :unsuccessful hold.
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores
-- @include parent
-- @include remove_tree

local out = {}
for _, job_key in ipairs(ARGV) do
  local state = ""
  if rcall("EXISTS", job_key) == 1 then
    if rcall("EXISTS", job_key .. ":lock") == 1 then
      state = "locked"
    else
      local queue_prefix, job_id = split_job_key(job_key)
      state = zset_state(queue_prefix, job_id) or "list"
    end
  end
  out[#out + 1] = state
  out[#out + 1] = rcall("SCARD", job_key .. ":dependencies")
  out[#out + 1] = rcall("HLEN", job_key .. ":processed")
  out[#out + 1] = rcall("HLEN", job_key .. ":failed")
  out[#out + 1] = rcall("ZCARD", job_key .. ":unsuccessful")
end
return out
