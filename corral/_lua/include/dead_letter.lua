-- Dead-letter queues: the record a job failed for good leaves for its copy into a DLQ.
-- Needs include/keys. Include it before fetch and finish, whose final failures call it.
--
-- A job dead-letters when its opts carry `x-dlq` (the job's, or its queue's default) or,
-- failing that, when the worker that failed it has one (`dead_letter_default`, which the
-- main script sets from its ARGV). The record is written in the same call that fails the job,
-- so a worker that dies right after cannot lose it: the hash K:x-dlq holds one field per
-- dead-lettering, numbered by its field "#" (HINCRBY: a job that dead-letters twice, retried
-- by hand in between, leaves two records), whose value is JSON
--   {"q": dlq name, "id": job id, "at": ms, "h": HGETALL of the job, "logs": its log lines}
-- taken after the failure was written and before removeOnFail may delete the job. Python
-- copies each record into the DLQ under an id made from its number (an idempotent add), then
-- HDELs it (corral/_async/dead_letter_queue.py); any worker of the queue sweeps records left
-- by one that died.

-- The worker's dead-letter queue, "" for none: the main script sets it from its ARGV.
local dead_letter_default = ""

-- The DLQ of the job at `job_key` ("" for none): its opts' `x-dlq`, else the worker's.
local function dead_letter_target(job_key)
  local raw = rcall("HGET", job_key, "opts")
  -- Decode only opts that name one: a job without a DLQ pays one HGET on a final failure.
  if raw and string.find(raw, '"x-dlq"', 1, true) then
    local ok, opts = pcall(cjson.decode, raw)
    if ok and type(opts) == "table" and type(opts["x-dlq"]) == "string" then
      return opts["x-dlq"]
    end
  end
  return dead_letter_default
end

-- Leave the record of a job that has just failed for good, when it has a DLQ.
local function record_dead_letter(prefix, job_id, job_key, now)
  local target = dead_letter_target(job_key)
  if target == "" then
    return
  end
  local pending = prefix .. "x-dlq"
  local number = rcall("HINCRBY", pending, "#", 1)
  local record = {q = target, id = job_id, at = now, h = rcall("HGETALL", job_key),
    logs = rcall("LRANGE", job_key .. ":logs", 0, -1)}
  rcall("HSET", pending, number, cjson.encode(record))
end
