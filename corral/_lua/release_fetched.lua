-- release_fetched: give back to wait the jobs a worker's fetch took when the worker never saw
-- the reply (the connection dropped after the server ran the fetch). Such a job was never
-- started, so it goes back as if never taken: no stalled count, no waiting for its lock to
-- expire, and to the head of wait where it was. Its lock tells it apart: the worker knows the
-- tokens the lost fetch handed out.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, active,
--       prioritized, pc, marker, events, meta, stalled.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] lock token base of the worker ("<base>" of "<base>:<seq>")
-- ARGV[3..] pairs: first token sequence number, count -- one pair per lost fetch
-- Returns the ids given back.
-- Error codes: none.
-- @include keys
-- @include events
-- @include scores

local prefix = ARGV[1]
local base = ARGV[2] .. ":"
local ranges = {}
for i = 3, #ARGV, 2 do
  ranges[#ranges + 1] = {tonumber(ARGV[i]), tonumber(ARGV[i]) + tonumber(ARGV[i + 1])}
end

local function lost(token)
  if not token or token:sub(1, #base) ~= base then
    return false
  end
  local seq = tonumber(token:sub(#base + 1))
  for _, range in ipairs(ranges) do
    if seq and seq >= range[1] and seq < range[2] then
      return true
    end
  end
  return false
end

local max_len = events_max_len()
local released = {}
for _, job_id in ipairs(rcall("LRANGE", K_ACTIVE, 0, -1)) do
  local job_key = prefix .. job_id
  if lost(rcall("GET", job_key .. ":lock")) and rcall("LREM", K_ACTIVE, -1, job_id) > 0 then
    rcall("DEL", job_key .. ":lock")
    rcall("SREM", K_STALLED, job_id)
    local priority = tonumber(rcall("HGET", job_key, "priority")) or 0
    -- Back at the head of wait, where the fetch took it from.
    make_ready(job_id, priority, true, max_len, "active")
    released[#released + 1] = job_id
  end
end
return released
