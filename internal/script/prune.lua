-- prune.lua: remove from a stream's consumer group the consumers that hold no pending
-- entry and have not been seen for a long time (processes that stopped, whose names
-- would otherwise pile up in XINFO CONSUMERS), never one that holds an entry.
--
-- KEYS[1] -> the stream
-- ARGV[1] -> the consumer group
-- ARGV[2] -> the consumer asking (never removed)
-- ARGV[3] -> how long, in ms, a consumer must have been idle to be removed
--
-- Returns the names removed.
--
-- Atomic: the pending count and idle time read by XINFO CONSUMERS cannot change before
-- XGROUP DELCONSUMER runs, so no entry pending at a removed consumer is lost.
local info = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
local minIdle = tonumber(ARGV[3])
local removed = {}
for _, c in ipairs(info) do
  local f = {}
  for i = 1, #c, 2 do
    f[c[i]] = c[i + 1]
  end
  if f['name'] ~= ARGV[2] and tonumber(f['pending']) == 0 and tonumber(f['idle']) >= minIdle then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    removed[#removed + 1] = f['name']
  end
end
return removed
