-- obliterate_queue: delete every job of the queue, then the queue's own keys; one batch per
-- call.
--
-- The first call pauses the queue so that no worker takes a job while the rest goes. Without
-- force, a call that finds an active job writes nothing and fails: deleting a job a worker is
-- running would lose its result. When every job list and set is empty the keys of KEYS go
-- too; what no list names (K:de:*, K:repeat*, K:metrics*, debris) is left for the caller's
-- SCAN, which can take its time between commands.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses all of them.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] "1" to delete active jobs too (force), else "0"
-- ARGV[3] at most this many jobs are deleted by this call (1000 at most, whatever is
--         asked: one call must not hold the server for long)
-- Returns 1 when jobs may be left (call again), 0 when the jobs and KEYS are all gone.
-- Error codes: -1 the queue has active jobs and force is not set (nothing was written).
-- @include keys
-- @include scores
-- @include remove
-- @include parent
-- @include purge

local prefix = ARGV[1]
if ARGV[2] ~= "1" and rcall("LLEN", K_ACTIVE) > 0 then
  return -1
end
rcall("HSET", K_META, "paused", 1)
local budget = math.min(tonumber(ARGV[3]), 1000)
for _, list_key in ipairs({K_ACTIVE, K_WAIT, K_PAUSED}) do
  budget = budget - purge_list_head(prefix, list_key, budget)
end
for _, set_key in ipairs({K_PRIORITIZED, K_DELAYED, K_WAITING_CHILDREN, K_COMPLETED, K_FAILED}) do
  budget = budget - purge_zset_head(prefix, set_key, budget)
end
if budget <= 0 then
  return 1
end
rcall("DEL", unpack(KEYS))
return 0
