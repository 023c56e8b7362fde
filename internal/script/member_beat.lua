-- member_beat.lua: a member of a partitioned stream's group says it is alive (or leaves),
-- and learns who else is.
--
-- KEYS[1] -> the group's members (a sorted set: member -> when its heartbeat runs out, ms)
-- ARGV[1] -> the member
-- ARGV[2] -> how long its heartbeat lasts (ms)
-- ARGV[3] -> now in ms ("" for the server's TIME)
-- ARGV[4] -> "1" to leave (a graceful stop), else ""
--
-- Returns the live members (their heartbeat not run out), in name order.
--
-- Atomic: members whose heartbeat ran out are removed in the same step.
--
-- Prelude: now.lua (nowMs), prepended by script.go.
local now = nowMs(ARGV[3])
local ttl = tonumber(ARGV[2])
if ARGV[4] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], 10 * ttl)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
table.sort(live)
return live
