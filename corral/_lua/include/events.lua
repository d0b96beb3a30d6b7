-- Events on K:events, trimmed approximately to the queue's opts.maxLenEvents (default 10000).
local function events_max_len()
  return tonumber(rcall("HGET", K_META, "opts.maxLenEvents")) or 10000
end

local function emit(max_len, ...)
  rcall("XADD", K_EVENTS, "MAXLEN", "~", max_len, "*", "event", ...)
end
