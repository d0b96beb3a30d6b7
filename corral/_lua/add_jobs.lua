-- add_jobs: add many jobs in one call (Queue.add_bulk sends a bulk as several such calls,
-- each bounded in jobs and bytes).
--
-- Each job is added exactly as add_job.lua adds one (include/add.lua). The parents named by
-- the jobs are checked first: when one is missing, and no job earlier in the call creates it,
-- nothing at all is written. One script call is atomic, so no transaction is needed.
--
-- KEYS: the queue's keys in corral._keys order (include/keys.lua), as add_job.
-- ARGV[1] key prefix of the queue's jobs ("bull:q:")
-- ARGV[2] n, the number of jobs
-- ARGV[3..6] the producer's id ("" for none), this call's number, and two numbers of earlier
--          calls whose answers the producer has heard, as add_job.lua's ARGV[20..23]
-- ARGV[7..24] a shared group: 18 values as add_job.lua's ARGV[2..19], used by short records
-- ARGV[25..] n records, each a size then its values:
--          18, then add_job.lua's ARGV[2..19] in that order (a job with options of its own);
--          4, then custom id, name, data, timestamp (add_job's ARGV[2], [3], [4], [6]): a job
--          whose other values are the shared group's. Most bulk adds give no options: four
--          values a job instead of eighteen make the call about a third cheaper.
-- Returns {reply1, ..., replyN}, each as add_job.lua returns it, except that a job whose add
-- deleted the delayed job holding its deduplication id (debounce) gets {job id, 1, id of the
-- deleted job}: that job may be one an earlier reply of the call (or an earlier call) names.
-- Returns {-7, parent key} when a parent is missing (nothing was written). A parent that an
-- earlier job of the call was to create, but did not (it was deduplicated, or its
-- idempotency key was used), is found missing only when its child's turn comes: the call
-- stops there, after the jobs before it were added, and returns their replies followed by
-- {parent key, -7} (fewer than n replies). A call sent again after it created jobs gets the
-- same replies again and writes nothing.
-- Error codes: -7 (see above).
-- @include keys
-- @include events
-- @include scores
-- @include remove
-- @include add
-- @include resend

local prefix = ARGV[1]
local n = tonumber(ARGV[2])
local producer, seq = ARGV[3], ARGV[4]
local SHARED = 7
-- Which of add_job's ARGV a short record carries, and where: index -> offset in the record.
local SHORT = {[2] = 0, [3] = 1, [4] = 2, [6] = 3}

local function full_reader(start)
  return function(i)
    return ARGV[start + i - 2]
  end
end

local function short_reader(start)
  return function(i)
    local offset = SHORT[i]
    if offset then
      return ARGV[start + offset]
    end
    return ARGV[SHARED + i - 2]
  end
end

local readers = {}
local cursor = 25
for i = 1, n do
  local size = tonumber(ARGV[cursor])
  readers[i] = size == 18 and full_reader(cursor + 1) or short_reader(cursor + 1)
  cursor = cursor + 1 + size
end

local earlier = earlier_answer(prefix, producer, seq)
if earlier then
  forget_answers(prefix, producer, ARGV[5], ARGV[6])
  return cjson.decode(earlier)
end

-- The parents named by the jobs must exist, or be created by an earlier job of the call.
local created = {}
for i = 1, n do
  local arg = readers[i]
  local parent_key = arg(10)
  if parent_key ~= "" and not created[parent_key] and rcall("EXISTS", parent_key) == 0 then
    return {-7, parent_key}
  end
  if arg(2) ~= "" then
    created[prefix .. arg(2)] = true
  end
end
forget_answers(prefix, producer, ARGV[5], ARGV[6])
local max_len = events_max_len()
local replies = {}
local created_any = false
begin_batch()
for i = 1, n do
  local reply = add_one(prefix, readers[i], max_len)
  if type(reply) ~= "table" then
    -- The check above took an earlier job of the call to create this parent, and it did
    -- not; the jobs before were written (no rollback in a script): say where it stopped.
    replies[i] = {readers[i](10), -7}
    break
  end
  if batch.replaced then
    reply[3] = batch.replaced
    batch.replaced = nil
  end
  replies[i] = reply
  created_any = created_any or reply[2] == 1
end
end_batch()
if created_any then
  keep_answer(prefix, producer, seq, cjson.encode(replies))
end
return replies
