-- Adding one job (add_job.lua, and each job of add_jobs.lua). Needs include/keys, events,
-- scores, remove.

-- The actor of the provenance record in a job's opts JSON (corral._provenance: opts["x-prov"]
-- .actor), or nil. Only opts that name the record are decoded: other adds pay one find.
local function provenance_actor(opts)
  if not string.find(opts, '"x-prov"', 1, true) then
    return nil
  end
  local ok, decoded = pcall(cjson.decode, opts)
  local record = ok and type(decoded) == "table" and decoded["x-prov"]
  if type(record) == "table" and type(record.actor) == "string" then
    return record.actor
  end
  return nil
end

-- Adds one job: arg(i) gives what add_job.lua calls ARGV[i] (add_job passes ARGV itself,
-- add_jobs a reader of each job's record). Returns add_job.lua's answer (a table, or -7 when
-- the parent is missing). In a batch (add_jobs), a debounced add that deleted the delayed
-- job holding its deduplication id leaves that job's id in batch.replaced.
local function add_one(prefix, arg, max_len)
  local parent_key = arg(10) or ""
  if parent_key ~= "" and rcall("EXISTS", parent_key) == 0 then
    return -7
  end
  -- K:id counts every add, custom ids and duplicates included, as BullMQ does.
  local counter = rcall("INCR", K_ID)
  local job_id = arg(2)
  if job_id == "" then
    job_id = tostring(counter)
  end
  local job_key = prefix .. job_id

  local idem_key = arg(18) or ""
  local idem_record = prefix .. "x-idem:" .. idem_key
  if idem_key ~= "" then
    local first = rcall("HMGET", idem_record, "jobId", "state", "value", "name")
    if first[1] then
      return {first[1], 2, first[2] or "", first[3] or "", first[4] or ""}
    end
  end

  if rcall("EXISTS", job_key) == 1 then
    emit(max_len, "duplicated", "jobId", job_id)
    return {job_id, 0}
  end

  local dedup_id = arg(13) or ""
  local dedup_ttl = tonumber(arg(14)) or 0
  local de_key = prefix .. "de:" .. dedup_id
  if dedup_id ~= "" then
    local holder = rcall("GET", de_key)
    if holder and rcall("EXISTS", prefix .. holder) == 0 then
      holder = nil -- its job is gone: the id is free again
    end
    if holder then
      local holder_active = rcall("EXISTS", prefix .. holder .. ":lock") == 1
      if arg(17) == "1" and holder_active then
        -- Keep-last-if-active: this add waits in K:dn:<id>, replacing any earlier one, and
        -- becomes a job when the active one finishes (include/dedup.lua).
        rcall("HSET", prefix .. "dn:" .. dedup_id, "name", arg(3), "data", arg(4),
          "opts", arg(5), "jid", job_id)
        emit(max_len, "deduplicated", "jobId", holder, "deduplicationId", dedup_id,
          "deduplicatedJobId", job_id)
        return {holder, 3}
      end
      if arg(16) == "1" and rcall("ZSCORE", K_DELAYED, holder) then
        -- Debounce: the job still waiting for its delay gives way to this one.
        rcall("ZREM", K_DELAYED, holder)
        delete_job(prefix .. holder)
        if batch then -- add_jobs tells which job went: it may be an earlier one of the call
          batch.replaced = holder
        end
        emit(max_len, "removed", "jobId", holder, "prev", "delayed")
        emit(max_len, "deduplicated", "jobId", job_id, "deduplicationId", dedup_id,
          "deduplicatedJobId", holder)
      else
        if arg(15) == "1" and dedup_ttl > 0 then
          rcall("PEXPIRE", de_key, dedup_ttl)
        end
        emit(max_len, "deduplicated", "jobId", holder, "deduplicationId", dedup_id,
          "deduplicatedJobId", job_id)
        return {holder, 3}
      end
    end
  end

  local timestamp = tonumber(arg(6))
  local delay = tonumber(arg(7))
  local priority = tonumber(arg(8))
  rcall("HSET", job_key, "name", arg(3), "data", arg(4), "opts", arg(5), "timestamp", arg(6),
    "delay", arg(7), "priority", arg(8))
  if parent_key ~= "" then
    rcall("HSET", job_key, "parentKey", parent_key, "parent", arg(11))
    rcall("SADD", parent_key .. ":dependencies", job_key)
  end
  if dedup_id ~= "" then
    rcall("HSET", job_key, "deid", dedup_id)
    if dedup_ttl > 0 then
      rcall("SET", de_key, job_id, "PX", dedup_ttl)
    else
      rcall("SET", de_key, job_id)
    end
  end
  if idem_key ~= "" then
    rcall("HSET", job_key, "x-idem", idem_key)
    rcall("HSET", idem_record, "jobId", job_id, "name", arg(3))
    rcall("PEXPIRE", idem_record, arg(19))
  end
  if not (batch and batch.meta) then
    rcall("HSETNX", K_META, "opts.maxLenEvents", max_len)
    if batch then
      batch.meta = true
    end
  end
  local actor = provenance_actor(arg(5))
  if actor then
    emit(max_len, "added", "jobId", job_id, "name", arg(3), "actor", actor)
  else
    emit(max_len, "added", "jobId", job_id, "name", arg(3))
  end

  if arg(12) == "1" then
    rcall("ZADD", K_WAITING_CHILDREN, arg(6), job_id)
    emit(max_len, "waiting-children", "jobId", job_id)
  elseif delay > 0 then
    schedule_delayed(job_id, timestamp + delay, max_len)
  else
    make_ready(job_id, priority, arg(9) == "1", max_len, nil)
  end
  return {job_id, 1}
end
