-- pending_at.lua: functions that claim.lua, touch.lua and release.lua share; it is prepended to each
-- when the script is loaded. In both, KEYS[1] is the stream, ARGV[1] the consumer group
-- and ARGV[2] the consumer.

-- parseID returns a stream id's milliseconds and sequence number.
local function parseID(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

-- pendingAt returns, for each of ids still pending at ARGV[2], {idle ms, delivery count}:
-- one XPENDING over the ids' range filtered to ARGV[2], asked for at most limit entries
-- (a few more than the ids: the range may hold many more of ARGV[2]'s entries, and every
-- one returned costs a conversion to Lua); an id it did not reach is looked up alone.
local function pendingAt(ids, limit)
  local lo, hi = ids[1], ids[1]
  local loMs, loSeq = parseID(lo)
  local hiMs, hiSeq = loMs, loSeq
  for i = 2, #ids do
    local ms, seq = parseID(ids[i])
    if ms < loMs or (ms == loMs and seq < loSeq) then
      lo, loMs, loSeq = ids[i], ms, seq
    end
    if ms > hiMs or (ms == hiMs and seq > hiSeq) then
      hi, hiMs, hiSeq = ids[i], ms, seq
    end
  end
  local found = {}
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1], lo, hi, limit, ARGV[2])
  for _, p in ipairs(pending) do
    found[p[1]] = {p[3], p[4]}
  end
  if #pending >= limit then
    for _, id in ipairs(ids) do
      if not found[id] then
        local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1, ARGV[2])
        if p[1] then
          found[id] = {p[1][3], p[1][4]}
        end
      end
    end
  end
  return found
end

-- byCountAt groups the entry ids ARGV[from..] still pending at ARGV[2] by their
-- delivery count plus delta (never below 0), for resetCounts, and lists the others.
local function byCountAt(from, delta)
  local ids = {}
  for i = from, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
  local found = pendingAt(ids, #ids + 16)
  local byCount, lost = {}, {}
  for _, id in ipairs(ids) do
    local p = found[id]
    if p then
      local n = math.max(tonumber(p[2]) + delta, 0)
      byCount[n] = byCount[n] or {}
      table.insert(byCount[n], id)
    else
      lost[#lost + 1] = id
    end
  end
  return byCount, lost
end

-- resetCounts gives each entry of byCount[n] (held at ARGV[2]) the delivery count n and,
-- when idle is set, that idle time: one XCLAIM … JUSTID per count, in chunks that keep
-- each call's arguments well within Lua's stack.
local function resetCounts(byCount, idle)
  for n, ids in pairs(byCount) do
    for from = 1, #ids, 1000 do
      local args = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0}
      for i = from, math.min(from + 999, #ids) do
        args[#args + 1] = ids[i]
      end
      if idle then
        args[#args + 1] = 'IDLE'
        args[#args + 1] = idle
      end
      args[#args + 1] = 'RETRYCOUNT'
      args[#args + 1] = n
      args[#args + 1] = 'JUSTID'
      redis.call(unpack(args))
    end
  end
end

