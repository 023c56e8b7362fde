-- value_park: keep the retry copy of a list item or channel message in a durable delay
-- set until it is due. On a reliable list the original item is taken out of the
-- consumer's processing list in the same atomic step, and the copy is parked only if the
-- item was still there; a plain list or a channel has no original left to complete (the
-- pop or the receive already took it), so the park is the ZADD alone.
--
-- KEYS[1] -> the delay set (a sorted set scored by due time in ms)
-- KEYS[2] -> (reliable lists only) the consumer's processing list holding the original
--
-- ARGV[1] -> the member: the retry copy's envelope behind a unique token, encoded by Go
--            (internal/wire.ValueDelayMember)
-- ARGV[2] -> the delay in ms
-- ARGV[3] -> the set's TTL in ms; 0: no expiry (keepFor: the set's expiry only grows)
-- ARGV[4] -> "now" in ms (a test's fake clock); empty: the server's TIME
-- ARGV[5] -> (with KEYS[2]) the original item, byte for byte
--
-- Returns the due time in ms; -1 when KEYS[2] is given and the item is no longer in it
-- (orphan recovery took it: nothing is written); or an error reply naming a key of the
-- wrong type.
--
-- All or nothing: the key types are checked before anything is written, so the item is
-- gone from the processing list exactly when the member is in the set.
--
-- Preludes: acl.lua (wrongType), now.lua, expiry.lua (keepFor); prepended by script.go.
local bad = wrongType(KEYS[1], 'zset')
if bad then
  return bad
end
if #KEYS > 1 then
  bad = wrongType(KEYS[2], 'list')
  if bad then
    return bad
  end
end

local checks = {}
if #KEYS > 1 then
  checks[1] = {'LREM', KEYS[2], '1', 'v'}
end
local denied = refusedPark(KEYS[1], ARGV[3], checks)
if denied then
  return denied -- before any write (acl.lua)
end
local now = nowMs(ARGV[4])

if #KEYS > 1 and redis.call('LREM', KEYS[2], 1, ARGV[5]) == 0 then
  return -1
end
local due = now + tonumber(ARGV[2])
local existed = redis.call('EXISTS', KEYS[1]) == 1
redis.call('ZADD', KEYS[1], due, ARGV[1])
keepFor(KEYS[1], existed, tonumber(ARGV[3]))
return due
