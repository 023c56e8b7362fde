-- scan_gate.lua: let one consumer of a group start a pass over the group's pending list
-- per period; the others, finding a pass started less than a period ago, leave it to
-- that one.
--
-- KEYS[1] -> the group's scan key
-- ARGV[1] -> the period in milliseconds
-- ARGV[2] -> the consumer asking (kept in the key, for whoever looks)
--
-- Returns 1 when the caller may start a pass (its start is recorded), 0 when another
-- started one less than a period ago.
--
-- The start time is the server's (TIME) and kept in the key's value, not only in its
-- expiry: miniredis lets keys expire only when its clock is moved on. The expiry, two
-- periods, only cleans the key up once no consumer scans.
--
-- Prelude: now.lua (nowMs), prepended by script.go.
local now = nowMs()
local last = redis.call('HGET', KEYS[1], 'at')
if last and now - tonumber(last) < tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'at', now, 'by', ARGV[2])
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[1]))
return 1
