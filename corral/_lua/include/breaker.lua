-- Circuit breakers (breaker_claim.lua, breaker_record.lua): settings, stored values, events.
--
-- A breaker's key is a hash: state ("closed", "open" or "half_open"; no key: closed),
-- until (open: the half-open time, ms), probe and probe_until (half-open: the token of the
-- caller holding the probe and the end of its lease, ms), fails (closed: the times of the
-- recent failures, ms, comma-separated, fewer than `failures` of them), opens
-- (how many times it opened), changed (ms of the last transition), and the settings
-- failures, window, cooldown and lease (ms) last given by a corral.Breaker.

local rcall = redis.call
local NAMES = {"failures", "window", "cooldown", "lease"}
local DEFAULTS = {failures = 5, window = 60000, cooldown = 30000, lease = 60000}

-- A whole number of at most 2^53 read from a breaker's hash or ARGV, else nil: whatever
-- another client wrote there ("abc", -1) must not make the script fail after it has written.
local function whole(value)
  local n = tonumber(value)
  if not n or n ~= n or n < 0 or n > 9007199254740991 then
    return nil
  end
  return math.floor(n)
end

local function fmt(n)
  return string.format("%.0f", n)
end

-- The breaker's hash as a table (HGETALL's flat reply).
local function read(key)
  local flat = rcall("HGETALL", key)
  local h = {}
  for i = 1, #flat, 2 do
    h[flat[i]] = flat[i + 1]
  end
  return h
end

-- A setting: the one given in ARGV[5 .. 8], else the stored one, else the default. A job's
-- breakers are checked by a worker that may have no corral.Breaker for them: the settings
-- stored by the last Breaker that used the key are the ones it goes by.
local function setting(h, i)
  local name = NAMES[i]
  local low = name == "failures" and 1 or 0
  local given = whole(ARGV[4 + i])
  if given and given >= low then
    return given
  end
  local stored = whole(h[name])
  if stored and stored >= low then
    return stored
  end
  return DEFAULTS[name]
end

-- The settings as a table; the given ones are stored where they differ from the stored ones.
local function settings(key, h)
  local s = {}
  for i, name in ipairs(NAMES) do
    s[name] = setting(h, i)
    if ARGV[4 + i] ~= "" and whole(h[name]) ~= s[name] then
      rcall("HSET", key, name, fmt(s[name]))
    end
  end
  return s
end

-- The state a hash says ("closed" when it says nothing known).
local function state_of(h)
  local state = h["state"]
  if state == "open" or state == "half_open" then
    return state
  end
  return "closed"
end

-- The breaker's name: the part of its key after the last ":".
local function name_of(key)
  return string.match(key, "([^:]*)$")
end

-- A transition, as a "breaker" event on the stream of the queue of the job that caused it
-- (when the caller gave that stream: KEYS[n + 1], with the queue's meta as KEYS[n + 2]).
local function event(n, key, from, to, until_ms)
  local events = KEYS[n + 1]
  if not events then
    return
  end
  local max_len = whole(rcall("HGET", KEYS[n + 2], "opts.maxLenEvents")) or 10000
  if max_len > 2147483647 then
    max_len = 10000
  end
  local fields = {"event", "breaker", "name", name_of(key), "state", to, "from", from}
  if ARGV[4] ~= "" then
    table.insert(fields, "jobId")
    table.insert(fields, ARGV[4])
  end
  if until_ms then
    table.insert(fields, "until")
    table.insert(fields, fmt(until_ms))
  end
  rcall("XADD", events, "MAXLEN", "~", max_len, "*", unpack(fields))
end

-- Move the breaker to open until now + cooldown.
local function open(key, h, now, s)
  local until_ms = now + s.cooldown
  local opens = (whole(h["opens"]) or 0) + 1
  rcall("HDEL", key, "probe", "probe_until", "fails")
  rcall("HSET", key, "state", "open", "until", fmt(until_ms), "changed", fmt(now), "opens",
    fmt(opens))
  return until_ms
end
