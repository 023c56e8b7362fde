-- delay_publish: a producer's delayed message: add it to the durable delay set of the
-- consumer's mount, due at the server's TIME + a delay (or at a given time), so that the
-- mount's sweep delivers it as it delivers a parked retry. Nothing else is written.
--
-- KEYS[1] -> the delay set (a sorted set scored by due time in ms)
-- KEYS[2] -> (optional) the stream or list the sweep delivers into: only its type is
--            checked (a channel is not a key: no KEYS[2])
--
-- ARGV[1] -> the member, encoded by Go (internal/wire.DelayMember for a stream,
--            internal/wire.ValueDelayMember for a list or channel)
-- ARGV[2] -> the delay in ms from now; ignored when ARGV[3] is given
-- ARGV[3] -> the due time in ms since the epoch; empty: now + ARGV[2]
-- ARGV[4] -> the set's TTL in ms; 0: no expiry (keepFor: the set's expiry only grows)
-- ARGV[5] -> (with KEYS[2]) the type KEYS[2] must hold when it exists: stream or list
--
-- Returns the due time in ms; or an error reply, before anything is written, naming a
-- key of the wrong type, or "TTL …" when the due time is further than the set's TTL
-- (the set could expire with the message in it).
--
-- Preludes: acl.lua (refusedPark, wrongType), now.lua (nowMs), expiry.lua (keepFor),
-- prepended by script.go.
local bad = wrongType(KEYS[1], 'zset')
if bad then
  return bad
end
if #KEYS > 1 then
  bad = wrongType(KEYS[2], ARGV[5])
  if bad then
    return bad
  end
end

local denied = refusedPark(KEYS[1], ARGV[4], {})
if denied then
  return denied
end

local now = nowMs('')
local due = tonumber(ARGV[3])
if not due then
  due = now + tonumber(ARGV[2])
end
local ttl = tonumber(ARGV[4])
if ttl > 0 and due - now >= ttl then
  return redis.error_reply('TTL the message is due in ' .. (due - now) .. ' ms, not within the delay set\'s TTL of ' .. ttl .. ' ms')
end
local existed = redis.call('EXISTS', KEYS[1]) == 1
redis.call('ZADD', KEYS[1], due, ARGV[1])
keepFor(KEYS[1], existed, ttl)
return due
