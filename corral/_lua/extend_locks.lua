-- extend_locks: renew many of one worker's locks in one call (the lock manager's tick).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses stalled.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] lock duration ms
-- ARGV[3..] pairs: job id, lock token
-- Returns the tokens whose lock is gone or held by another token (lost locks); tokens, not
-- ids, because a worker may hold a job again under a new token while an old lease of it runs.
-- Error codes: none.
-- @include keys

local prefix = ARGV[1]
local lost = {}
for i = 3, #ARGV, 2 do
  local job_id = ARGV[i]
  local lock_key = prefix .. job_id .. ":lock"
  if rcall("GET", lock_key) == ARGV[i + 1] then
    rcall("PEXPIRE", lock_key, ARGV[2])
    -- A renewed job is alive: take it off the stalled checker's suspect list.
    rcall("SREM", K_STALLED, job_id)
  else
    lost[#lost + 1] = ARGV[i + 1]
  end
end
return lost
