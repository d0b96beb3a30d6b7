-- remove_jobs: remove one chunk of a tree of jobs the caller collected, children before
-- parents: a removal too big for one call of remove_job.lua or remove_unprocessed_children.lua
-- (the caller is corral/_async/job_removal.py, which says what stays atomic).
--
-- Time passed since the caller read the tree, so each job is checked again, and kept as it is
-- when it cannot go now: one that holds a lock or is in active (it became active: "busy"),
-- one with pending children (one of them was kept, or was added since), one in no zset that
-- is not found in its queue's wait or paused list within the entries read. Jobs that are gone
-- are only dropped from their tree parent's :dependencies. A parent is released when the job
-- was its last pending child only when the job's entry asks for it: the parents inside the
-- removal are not (they go in this call or a later one).
--
-- Lists are read once per call, not once per job (include/remove_tree.lua take_from_list):
-- from the start index the caller gives (where it saw the chunk's jobs, minus a margin), at
-- most ARGV[2] entries; a job not found there is looked for at both ends of the list, where
-- jobs come and go. A job found in no list goes as a job in no state when the lists were read
-- whole or the caller saw it in no list (entry where = "-"), unless it is in its queue's
-- active list; else it is kept. The lookups outside the windows read ARGV[2] entries at most,
-- all together. So a call reads about ARGV[2] entries per list it touches, whatever their
-- lengths, with an LSET per job taken out and one LREM per list.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses none of them (every
--       key comes from the full job keys, which may belong to several queues).
-- ARGV[1] tombstone: a value no list holds (marks entries to drop with one LREM)
-- ARGV[2] at most this many entries of each list are read
-- ARGV[3] n: how many (list key, start index) pairs follow; a list not named is read from 0
-- ARGV[4 .. 3 + 2n] list key, start index
-- then four values per job, in removal order: full job key, the key of its parent in the tree
--   ("" for none), "1" to release its parent when this was its last pending child (else "0"),
--   where the caller saw it: "" (anywhere) or "-" (in no list)
-- Returns {removed, busy, key...}: how many jobs were removed, how many of the keys that
-- follow became active (they come first), then the keys of the jobs kept for another reason.
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores
-- @include parent
-- @include remove_tree

local tombstone = ARGV[1]
local limit = tonumber(ARGV[2])
local starts = {}
local n_lists = tonumber(ARGV[3])
for i = 1, n_lists do
  starts[ARGV[2 + 2 * i]] = tonumber(ARGV[3 + 2 * i])
end

local jobs = {}
for i = 4 + 2 * n_lists, #ARGV, 4 do
  jobs[#jobs + 1] = {key = ARGV[i], tree_parent = ARGV[i + 1], release = ARGV[i + 2] == "1",
    nowhere = ARGV[i + 3] == "-"}
end

local busy, kept = {}, {}
-- Per queue prefix: the ids of this chunk in no zset, to look for in its lists.
local wanted, n_wanted, order = {}, {}, {}

-- First pass: what can go, and where each job is.
for _, job in ipairs(jobs) do
  local job_key = job.key
  local queue_prefix, job_id = split_job_key(job_key)
  job.prefix, job.id = queue_prefix, job_id
  if rcall("EXISTS", job_key) == 0 then
    job.skip = true
    if job.tree_parent ~= "" and rcall("SREM", job.tree_parent .. ":dependencies", job_key) == 1
      and job.release then
      -- A dependency whose job is gone would keep the parent waiting for ever.
      release_if_done(job.tree_parent, nil)
    end
  elseif rcall("EXISTS", job_key .. ":lock") == 1 then
    job.skip = true
    busy[#busy + 1] = job_key
  else
    job.state = zset_state(queue_prefix, job_id)
    if not job.state then
      if rcall("SCARD", job_key .. ":dependencies") > 0 then
        -- Ready although children are pending (a child released it early): its children go
        -- first, and it goes in the caller's next pass.
        job.skip = true
        kept[#kept + 1] = job_key
      else
        if not wanted[queue_prefix] then
          wanted[queue_prefix], n_wanted[queue_prefix] = {}, 0
          order[#order + 1] = queue_prefix
        end
        wanted[queue_prefix][job_id] = true
        n_wanted[queue_prefix] = n_wanted[queue_prefix] + 1
      end
    end
  end
end

-- The entries the lookups outside the windows (LPOS at the ends, in active) may still read,
-- all lists together: MAXLEN bounds each, this bounds them all.
local lookups_left = limit
-- Returns the index found (or false), and whether the whole list was read.
local function lookup(list_key, job_id, rank)
  local len = rcall("LLEN", list_key)
  local reach = math.min(1000, lookups_left, len)
  if len == 0 or reach <= 0 then
    return false, len == 0
  end
  lookups_left = lookups_left - reach
  return rcall("LPOS", list_key, job_id, "RANK", rank, "MAXLEN", reach), reach >= len
end

-- Look for the jobs in no zset, in wait then in the legacy paused list of their queue.
local found_in = {}
-- Keys not found in a list that was read only in part: they may be further on.
local partial = {}
for _, queue_prefix in ipairs(order) do
  local left, n_left = wanted[queue_prefix], n_wanted[queue_prefix]
  for _, name in ipairs({"wait", "paused"}) do
    if n_left == 0 then
      break
    end
    local list_key = queue_prefix .. name
    local found, whole = take_from_list(list_key, left, n_left, starts[list_key] or 0, limit,
      tombstone)
    for job_id in pairs(found) do
      found_in[queue_prefix .. job_id] = name
      left[job_id] = nil
      n_left = n_left - 1
    end
    if not whole then
      -- Jobs come and go at the ends of a list: look there too, within the same bound.
      for job_id in pairs(left) do
        local index = lookup(list_key, job_id, 1) or lookup(list_key, job_id, -1)
        if index then
          rcall("LSET", list_key, index, tombstone)
          if index < rcall("LLEN", list_key) / 2 then
            rcall("LREM", list_key, 1, tombstone)
          else
            rcall("LREM", list_key, -1, tombstone)
          end
          found_in[queue_prefix .. job_id] = name
          left[job_id] = nil
          n_left = n_left - 1
        else
          partial[queue_prefix .. job_id] = true
        end
      end
    end
  end
end

-- Second pass, in order: remove what can go.
local removed = 0
for _, job in ipairs(jobs) do
  if not job.skip then
    local job_key, queue_prefix, job_id = job.key, job.prefix, job.id
    local active_key = queue_prefix .. "active"
    local prev = job.state
    local verdict = "go"
    if prev then
      if rcall("SCARD", job_key .. ":dependencies") > 0 then
        verdict = "kept"
      else
        rcall("ZREM", queue_prefix .. prev, job_id)
      end
    else
      prev = found_in[job_key]
      if not prev then
        -- In no list read. It goes as a job in no state when the lists were read whole, or
        -- when the caller saw it in no list, unless it is in active (recovered stalled jobs
        -- are there without a lock).
        if partial[job_key] and not job.nowhere then
          verdict = "kept"
        else
          local index, whole = lookup(active_key, job_id, 1)
          if index then
            verdict = "busy"
          elseif not whole then
            verdict = "kept"
          end
        end
      end
    end
    if verdict == "go" then
      local hold = true
      if job.release then
        hold = {}
      end
      forget_job(job_key, prev, hold)
      removed = removed + 1
    elseif verdict == "busy" then
      busy[#busy + 1] = job_key
    else
      kept[#kept + 1] = job_key
    end
  end
end

local out = {removed, #busy}
for _, key in ipairs(busy) do
  out[#out + 1] = key
end
for _, key in ipairs(kept) do
  out[#out + 1] = key
end
return out
