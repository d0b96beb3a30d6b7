-- breaker_claim: may a call (or a job) use the downstreams behind these circuit breakers?
--
-- All or nothing: when any breaker refuses, nothing is written and the caller learns when to
-- try again. Else each breaker whose cooldown has passed (open -> half_open), or whose probe's
-- lease has passed (the probe crashed or hangs), gives its probe to the caller: in half-open
-- exactly one caller at a time runs, the one holding the probe, until breaker_record.lua
-- hears its outcome or its lease passes. The hash's fields: see include/breaker.lua.
--
-- KEYS[1..n] the breakers' hashes (corral._keys.breaker_key)
-- KEYS[n+1], KEYS[n+2] optional: the events stream and meta hash of the queue of the job that
--            asks; a transition (and a probe replaced) is then a "breaker" event there
-- ARGV[1] n
-- ARGV[2] now (epoch ms)
-- ARGV[3] the caller's token (a probe is held under it)
-- ARGV[4] the id of the job that asks ("": none), in events
-- ARGV[5..8] failures, window ms, cooldown ms, probe lease ms ("": the stored setting, else
--            the default: 5, 60000, 30000, 60000)
-- Returns {1, 0, role_1, ..., role_n}: go ahead; role "closed" (nothing to do after but
--   report a failure), "probe" (the caller holds the probe: it just went half-open),
--   "probe_again" (the caller holds the probe: the last probe's lease had passed),
--   "probe_next" (the caller holds the probe: the last probe was released) or "held" (the
--   caller's token held it already: a resent claim);
--   or {0, retry_at, state_1, ..., state_n}: refused, try again at retry_at (ms); state
--   "closed", "open" (cooldown not over), "busy" (half-open, another caller's probe runs) or
--   "half_open" (it would give its probe, but another breaker refused).
-- Error codes: none.
-- @include breaker

local n = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local token = ARGV[3]

-- First every breaker's verdict, with nothing written, so that a refusal writes nothing.
local hashes, roles, retry_at, refused = {}, {}, 0, false
for i = 1, n do
  local h = read(KEYS[i])
  hashes[i] = h
  local state = state_of(h)
  local role = "closed"
  local until_ms = whole(h["until"]) or 0
  if state == "open" then
    if now < until_ms then
      role = "open"
      retry_at = math.max(retry_at, until_ms)
    else
      role = "probe"
    end
  elseif state == "half_open" then
    local probe_until = whole(h["probe_until"]) or 0
    if not h["probe"] then
      role = "probe_next"
    elseif h["probe"] == token then
      role = "held"
    elseif now < probe_until then
      role = "busy"
      -- The probe may end well before its lease: come back after a cooldown at most.
      local cooldown = math.max(setting(h, 3), 1)
      retry_at = math.max(retry_at, math.min(probe_until, now + cooldown))
    else
      role = "probe_again"
    end
  end
  roles[i] = role
  if role == "open" or role == "busy" then
    refused = true
  end
end

if refused then
  local reply = {0, retry_at}
  for i = 1, n do
    local role = roles[i]
    if role ~= "closed" and role ~= "open" and role ~= "busy" then
      role = "half_open"
    end
    reply[i + 2] = role
  end
  return reply
end

local reply = {1, 0}
for i = 1, n do
  local key, h, role = KEYS[i], hashes[i], roles[i]
  if role == "probe" or role == "probe_again" or role == "probe_next" then
    local s = settings(key, h)
    rcall("HSET", key, "state", "half_open", "probe", token, "probe_until", fmt(now + s.lease))
    if role == "probe" then
      rcall("HSET", key, "changed", fmt(now))
      event(n, key, "open", "half_open", nil)
    elseif role == "probe_again" then
      event(n, key, "half_open", "half_open", nil)  -- a new probe: the last one's lease passed
    end
  elseif role == "closed" then
    settings(key, h)
  end
  reply[i + 2] = role
end
return reply
