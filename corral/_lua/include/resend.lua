-- Adds sent again (corral's; BullMQ has no such thing). A producer that lost the reply of an
-- add cannot tell whether the server ran it, so it sends the same call again; for that to
-- never make a second job, each producer numbers its add calls, and the answer of every call
-- that created jobs is kept in K:x-add:<producer> under its number. A call whose number is
-- there gets the answer kept for it and writes nothing. The producer says, on its later calls,
-- which numbers it has heard back from (at most two a call): those are forgotten. What it
-- never says (it stopped without closing) goes with the key, which lives RESEND_TTL_MS after
-- the producer's last add: far longer than a producer goes on resending.

-- How long a producer's answers outlive its last add, in ms (it resends for much less).
local RESEND_TTL_MS = 600000

-- The answer kept for call `seq` of `producer` (as kept: text), or nil: not run before.
local function earlier_answer(prefix, producer, seq)
  if producer == "" then
    return nil
  end
  return rcall("HGET", prefix .. "x-add:" .. producer, seq) or nil
end

-- Keep `answer` (text: a job id, or add_jobs' replies as JSON) for call `seq`, which created
-- jobs.
local function keep_answer(prefix, producer, seq, answer)
  if producer == "" then
    return
  end
  local key = prefix .. "x-add:" .. producer
  rcall("HSET", key, seq, answer)
  rcall("PEXPIRE", key, RESEND_TTL_MS)
end

-- Forget the calls `done1` and `done2` ("" for none): the producer has heard their answers.
local function forget_answers(prefix, producer, done1, done2)
  if producer ~= "" and done1 ~= "" then
    rcall("HDEL", prefix .. "x-add:" .. producer, done1, done2 ~= "" and done2 or done1)
  end
end
