-- drain_queue: delete jobs waiting to run (wait, the legacy paused list, prioritized, and
-- delayed when asked), hashes and sub-keys included; one batch per call.
--
-- Active, completed, failed and waiting-children jobs stay. K:pc is left as it is (BullMQ
-- leaves it too; the next fetch that finds prioritized empty deletes it). The caller loops
-- while jobs are left, so a queue of millions never blocks the server in one call.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, paused,
--       prioritized, delayed.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] "1" to drain delayed jobs too, else "0"
-- ARGV[3] at most this many jobs are deleted by this call (1000 at most, whatever is
--         asked: one call must not hold the server for long)
-- Returns how many jobs are left to drain (call again while > 0).
-- Error codes: none.
-- @include keys
-- @include scores
-- @include remove
-- @include parent
-- @include purge

local prefix = ARGV[1]
local budget = math.min(tonumber(ARGV[3]), 1000)
budget = budget - purge_list_head(prefix, K_WAIT, budget)
budget = budget - purge_list_head(prefix, K_PAUSED, budget)
budget = budget - purge_zset_head(prefix, K_PRIORITIZED, budget)
local left = rcall("LLEN", K_WAIT) + rcall("LLEN", K_PAUSED) + rcall("ZCARD", K_PRIORITIZED)
if ARGV[2] == "1" then
  purge_zset_head(prefix, K_DELAYED, budget)
  left = left + rcall("ZCARD", K_DELAYED)
end
return left
