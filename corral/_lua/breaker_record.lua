-- breaker_record: the outcome of a call (or a job) behind these circuit breakers.
--
-- closed: a failure is remembered; `failures` of them within `window` ms open the breaker
--   for `cooldown` ms (closed -> open). A success changes nothing.
-- open: nothing changes (the outcome of a call that started before the breaker opened).
-- half_open: only the caller holding the probe counts: its success closes the breaker
--   (half_open -> closed), its failure opens it for another cooldown (half_open -> open),
--   and "release" (it ended without an outcome: cancelled, put back) frees the probe for the
--   next caller. Another caller's outcome (a probe whose lease passed) changes nothing.
-- The hash's fields: see include/breaker.lua.
--
-- KEYS[1..n] the breakers' hashes (corral._keys.breaker_key)
-- KEYS[n+1], KEYS[n+2] optional: the events stream and meta hash of the queue of the job the
--            outcome is of; a transition is then a "breaker" event there
-- ARGV[1] n
-- ARGV[2] now (epoch ms)
-- ARGV[3] the caller's token (the one it claimed a probe with)
-- ARGV[4] the id of the job the outcome is of ("": none), in events
-- ARGV[5..8] failures, window ms, cooldown ms, probe lease ms ("": the stored setting, else
--            the default: 5, 60000, 30000, 60000)
-- ARGV[9] the outcome: "success", "failure" or "release"
-- Returns {change_1, ..., change_n}: "" (no transition), "closed>open", "half_open>closed"
--   or "half_open>open".
-- Error codes: none.
-- @include breaker

local n = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local token = ARGV[3]
local outcome = ARGV[9]

local reply = {}
for i = 1, n do
  local key = KEYS[i]
  local h = read(key)
  local state = state_of(h)
  local change = ""
  if state == "closed" and outcome == "failure" then
    local s = settings(key, h)
    -- The failures still within the window, oldest first, and this one.
    local recent = {}
    for t in string.gmatch(h["fails"] or "", "[^,]+") do
      local at = whole(t)
      if at and at > now - s.window then
        table.insert(recent, at)
      end
    end
    table.insert(recent, now)
    if #recent >= s.failures then
      local until_ms = open(key, h, now, s)
      event(n, key, "closed", "open", until_ms)
      change = "closed>open"
    else
      -- Fewer than `failures` of them: opening (which forgets them) keeps the field small.
      local kept = {}
      for j = 1, #recent do
        kept[j] = fmt(recent[j])
      end
      rcall("HSET", key, "fails", table.concat(kept, ","))
    end
  elseif state == "half_open" and h["probe"] == token then
    if outcome == "success" then
      rcall("HDEL", key, "probe", "probe_until", "until", "fails")
      rcall("HSET", key, "state", "closed", "changed", fmt(now))
      event(n, key, "half_open", "closed", nil)
      change = "half_open>closed"
    elseif outcome == "failure" then
      local until_ms = open(key, h, now, settings(key, h))
      event(n, key, "half_open", "open", until_ms)
      change = "half_open>open"
    else
      rcall("HDEL", key, "probe", "probe_until")
    end
  end
  reply[i] = change
end
return reply
