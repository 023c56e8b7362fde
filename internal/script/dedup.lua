-- dedup.lua: the completion marks of settle.Dedupe, shared by every script that completes
-- deliveries with them; it is prepended to each when the script is loaded (see script.go).
--
-- A mark set is a sorted set beside the source, in its hash slot (keys.Dedup): each
-- member a dedup key, scored by the time in ms its mark ends (the completion's "now" +
-- the window). A mark is live while its score is after "now".

-- refusedMarks(set, window) returns the error reply a mark write would meet (the set of
-- another type, a command the user may not run), before any write; nil when none.
local function refusedMarks(set, window)
  local kind = redis.call('TYPE', set)['ok']
  if kind ~= 'zset' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. set .. ' holds a ' .. kind .. ', not a zset')
  end
  return refusedAny({{'ZADD', set, '0', 'm'}, {'ZREMRANGEBYRANK', set, '0', '0'}, {'PTTL', set}, {'PEXPIRE', set, window}})
end

-- markDone(set, now, window, keys) marks each of keys completed until now + window (ms),
-- drops up to 100 marks that ended (the lowest scores), and keeps the set alive at least
-- window from now without shortening a longer life (keepFor, expiry.lua).
local function markDone(set, now, window, keys)
  if #keys == 0 then
    return
  end
  local existed = redis.call('EXISTS', set) == 1
  local args = {}
  for _, k in ipairs(keys) do
    args[#args + 1] = now + window
    args[#args + 1] = k
    if #args >= 1000 then -- one ZADD per 500 keys: fewer values than Lua unpacks
      redis.call('ZADD', set, unpack(args))
      args = {}
    end
  end
  if #args > 0 then
    redis.call('ZADD', set, unpack(args))
  end
  local ended = redis.call('ZCOUNT', set, '-inf', now)
  if ended > 0 then
    redis.call('ZREMRANGEBYRANK', set, 0, math.min(ended, 100) - 1)
  end
  keepFor(set, existed, window)
end
