-- search_jobs: find, in one chunk of one state's set, the jobs whose id, name, data (JSON
-- text) or failedReason holds a text; writes nothing. The server half of the dashboard's
-- search (corral/dashboard/search.py), which walks a state chunk by chunk with a cursor.
--
-- The chunk is read by index: entries ARGV[3] .. ARGV[3] + ARGV[4] - 1 of the state in the
-- order the getters list it (lists oldest first, from their right end; delayed, prioritized
-- and waiting-children by ascending score; completed and failed newest first), then one
-- HMGET per entry. So a call costs at most ARGV[4] (<= 10000) entries, whatever the set's
-- size. Matching is plain (string.find with plain=true: no pattern syntax) on the field
-- lowered with string.lower, which lowers ASCII letters only: the caller lowers the needle the
-- same way. A job whose hash is gone (removed since the set was read) is skipped.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, paused, active,
--       prioritized, delayed, waiting-children, completed and failed (one per call).
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] state: waiting, paused, active, prioritized, delayed, waiting-children, completed
--         or failed
-- ARGV[3] offset: index, in the order above, of the first entry to read (integer >= 0)
-- ARGV[4] chunk: how many entries to read at most (integer, 1 .. 10000)
-- ARGV[5] needle, ASCII letters lowered (1 .. 1000 bytes)
-- ARGV[6] stop after this many matches (integer >= 1): the rest of the chunk is left for the
--         next call, which starts at the returned offset
-- Returns {next offset, entries in the state now, server CPU microseconds this call spent,
-- id1, id2, ...}: the matching ids in set order; the state is done when next offset >= entries.
-- Error codes (returned alone, nothing read): -1 unknown state, -2 offset not an integer
-- >= 0, -3 chunk not an integer in 1 .. 10000, -4 needle empty or longer than 1000 bytes,
-- -5 stop count not an integer >= 1.
-- @include keys

local MAX_CHUNK = 10000
local MAX_NEEDLE = 1000

local prefix = ARGV[1]
local state = ARGV[2]
local offset = tonumber(ARGV[3])
local chunk = tonumber(ARGV[4])
local needle = ARGV[5]
local wanted = tonumber(ARGV[6])

local function is_int(n, low)
  return n ~= nil and n >= low and n == math.floor(n)
end

local lists = { waiting = K_WAIT, paused = K_PAUSED, active = K_ACTIVE }
local zsets = {
  prioritized = K_PRIORITIZED,
  delayed = K_DELAYED,
  ["waiting-children"] = K_WAITING_CHILDREN,
  completed = K_COMPLETED,
  failed = K_FAILED,
}
local key = lists[state] or zsets[state]
if key == nil then
  return -1
end
if not is_int(offset, 0) then
  return -2
end
if not is_int(chunk, 1) or chunk > MAX_CHUNK then
  return -3
end
if needle == nil or #needle == 0 or #needle > MAX_NEEDLE then
  return -4
end
if not is_int(wanted, 1) then
  return -5
end

-- os.clock (Redis >= 7, Valkey): CPU time; TIME is frozen for the length of a script.
local started = os.clock()
local ids
local size
if lists[state] then
  size = rcall("LLEN", key)
  -- Oldest first is the right end of an LPUSHed list: entry i is list index -(i + 1).
  local window = rcall("LRANGE", key, -(offset + chunk), -(offset + 1))
  ids = {}
  for i = #window, 1, -1 do
    ids[#ids + 1] = window[i]
  end
  -- A window reaching past the left end is clipped by LRANGE to the entries that exist.
else
  size = rcall("ZCARD", key)
  if state == "completed" or state == "failed" then
    ids = rcall("ZREVRANGE", key, offset, offset + chunk - 1)
  else
    ids = rcall("ZRANGE", key, offset, offset + chunk - 1)
  end
end

local function holds(text)
  return text and string.find(string.lower(text), needle, 1, true) ~= nil
end

local out = { 0, size, 0 }
local read = 0
local found = 0
for _, job_id in ipairs(ids) do
  read = read + 1
  local fields = rcall("HMGET", prefix .. job_id, "name", "data", "failedReason")
  -- A hash with none of them is gone (removed since the set was read): not a job any more.
  if (fields[1] or fields[2] or fields[3])
    and (holds(job_id) or holds(fields[1]) or holds(fields[3]) or holds(fields[2])) then
    out[#out + 1] = job_id
    found = found + 1
    if found >= wanted then
      break
    end
  end
end

out[1] = offset + read
out[3] = math.floor((os.clock() - started) * 1000000)
return out
