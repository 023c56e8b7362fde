-- park: keep a retry copy in a durable delay set and acknowledge the original entry, in
-- one atomic step.
--
-- KEYS[1] -> the delay set (a sorted set scored by due time in ms)
-- KEYS[2] -> the stream the original entry was read from
--
-- ARGV[1] -> the member: the retry copy, encoded by Go (internal/wire.DelayMember)
-- ARGV[2] -> the delay in ms
-- ARGV[3] -> the set's TTL in ms; 0: no expiry
-- ARGV[4] -> the consumer group
-- ARGV[5] -> the original entry id
-- ARGV[6] -> "now" in ms (a test's fake clock); empty: the server's TIME
--
-- Returns the due time in ms.
local now = tonumber(ARGV[6])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local due = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], due, ARGV[1])
redis.call('XACK', KEYS[2], ARGV[4], ARGV[5])
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return due
