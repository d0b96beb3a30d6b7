-- Take an active job back from the worker that holds it: check the token like
-- move_to_finished.lua, then LREM active, DEL lock, SREM stalled. Returns 0 or an error code
-- (-1 job missing, -2 lock missing, -6 lock held by another token, -3 not in active).
-- A token "0" skips the lock check (manual processing without a worker).
local function release_active(job_key, job_id, token)
  if rcall("EXISTS", job_key) == 0 then
    return -1
  end
  local lock_key = job_key .. ":lock"
  if token ~= "0" then
    local holder = rcall("GET", lock_key)
    if not holder then
      return -2
    end
    if holder ~= token then
      return -6
    end
  end
  if rcall("LREM", K_ACTIVE, -1, job_id) == 0 then
    return -3
  end
  rcall("DEL", lock_key)
  rcall("SREM", K_STALLED, job_id)
  return 0
end
