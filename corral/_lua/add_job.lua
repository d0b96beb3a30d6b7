-- add_job: create one job and queue it in wait, prioritized, delayed or waiting-children
-- (BullMQ 6.x layout).
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua); uses wait, prioritized, pc,
--       delayed, waiting-children, marker, events, meta, id.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] custom job id, or "" to take the next value of K:id
-- ARGV[3] name          ARGV[4] data (JSON)        ARGV[5] opts (JSON, BullMQ's names)
-- ARGV[6] timestamp ms  ARGV[7] delay ms (>= 0)    ARGV[8] priority (0 = none)
-- ARGV[9] "1" for lifo, else "0"
-- ARGV[10] the parent's full key ("bull:pq:<id>", any queue of the prefix) or "" for none:
--          the job gets `parentKey` and `parent`, and joins the parent's :dependencies
-- ARGV[11] the `parent` field: JSON {"id", "queueKey"} plus its failure policy flag, or ""
-- ARGV[12] "1" for a flow parent: it waits in waiting-children (score = timestamp) for the
--          children added after it, with events `added`, `waiting-children`; else "0"
-- ARGV[13] deduplication id, or "" for none (BullMQ's opts.de; the job gets `deid`)
-- ARGV[14] deduplication ttl ms (0: until the job finishes)
-- ARGV[15] "1" to extend the ttl on a duplicate add   ARGV[16] "1" to replace a job that is
--          still delayed (debounce)                    ARGV[17] "1" for keep-last-if-active
-- ARGV[18] idempotency key, or "" (corral's: K:x-idem:<key>, field `x-idem` on the job)
-- ARGV[19] idempotency window ms
-- ARGV[20] the producer's id, or "" (no resend protection; include/resend.lua)
-- ARGV[21] the number of this call among the producer's adds
-- ARGV[22], ARGV[23] numbers of earlier calls whose answers the producer has heard, or ""
--          (ARGV[20..23] may be left out: a flow's jobs, added in one transaction, are not
--          resent)
-- Returns {job id, 1} when the job was created; {job id, 0} when a job with that custom id
-- already existed (nothing is written but a `duplicated` event; it is not linked to the
-- parent); {kept job id, 3} when the deduplication id is held by another job (a
-- `deduplicated` event; with keep-last-if-active and the holder active, this add is kept in
-- K:dn:<id> to run after it); {first job id, 2, state, value, name} when the idempotency key
-- was used within its window (state "" while unfinished, else "completed" with the return
-- value or "failed" with the reason). A call sent again after it created its job gets
-- {job id, 1} again and writes nothing.
-- Error codes: -7 the parent does not exist (nothing is written, K:id is not counted).
-- @include keys
-- @include events
-- @include scores
-- @include remove
-- @include add
-- @include resend

local prefix, producer, seq = ARGV[1], ARGV[20] or "", ARGV[21]
local earlier = earlier_answer(prefix, producer, seq)
if earlier then
  forget_answers(prefix, producer, ARGV[22], ARGV[23])
  return {earlier, 1} -- kept only for a call that created its job: its id
end
local function arg(i)
  return ARGV[i]
end
local answer = add_one(prefix, arg, events_max_len())
if type(answer) == "table" then -- a refused add (-7) writes nothing, forgets nothing
  forget_answers(prefix, producer, ARGV[22], ARGV[23])
  if answer[2] == 1 then
    keep_answer(prefix, producer, seq, answer[1])
  end
end
return answer
