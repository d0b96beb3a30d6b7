-- Events on K:events, trimmed approximately to the queue's opts.maxLenEvents (default 10000).

-- A count read from stored data (K:meta, a job's opts): an integer from 0 to 2^31 - 1, else
-- `default`. Whatever another client wrote there ("abc", 1e20) must not make a command fail
-- after the script has written (XADD MAXLEN refuses "1e+20").
local function stored_count(value, default)
  local n = tonumber(value)
  if not n or n ~= n or n < 0 or n > 2147483647 then
    return default
  end
  return math.floor(n)
end

local function events_max_len()
  return stored_count(rcall("HGET", K_META, "opts.maxLenEvents"), 10000)
end

local function emit(max_len, ...)
  rcall("XADD", K_EVENTS, "MAXLEN", "~", max_len, "*", "event", ...)
end
