-- park: keep a retry copy in a durable delay set and acknowledge the original entry, in
-- one atomic step.
--
-- KEYS[1] -> the delay set (a sorted set scored by due time in ms)
-- KEYS[2] -> the stream the original entry was read from
--
-- ARGV[1] -> the member: the retry copy, encoded by Go (internal/wire.DelayMember)
-- ARGV[2] -> the delay in ms
-- ARGV[3] -> the set's TTL in ms; 0: no expiry (keepFor: the set's expiry only grows)
-- ARGV[4] -> the consumer group
-- ARGV[5] -> the original entry id
-- ARGV[6] -> "now" in ms (a test's fake clock); empty: the server's TIME
-- ARGV[7] -> the consumer settling the entry: it must still own it
--
-- Returns the due time in ms; an error reply "NOTOWNER …" when the entry is no longer
-- pending to ARGV[7] (nothing is written); or an error reply naming a key of the wrong
-- type (checked before anything is written).
--
-- Preludes: acl.lua, now.lua, expiry.lua; prepended by script.go.
local kinds = {'zset', 'stream'}
for i = 1, 2 do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= kinds[i] and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[i] .. ' holds a ' .. kind .. ', not a ' .. kinds[i])
  end
end
if #redis.call('XPENDING', KEYS[2], ARGV[4], ARGV[5], ARGV[5], 1, ARGV[7]) == 0 then
  return redis.error_reply('NOTOWNER entry ' .. ARGV[5] .. ' is not pending to consumer ' .. ARGV[7])
end
local denied = refusedPark(KEYS[1], ARGV[3], {{'XACK', KEYS[2], ARGV[4], ARGV[5]}})
if denied then
  return denied -- before any write (acl.lua)
end
local now = nowMs(ARGV[6])
local due = now + tonumber(ARGV[2])
local existed = redis.call('EXISTS', KEYS[1]) == 1
redis.call('ZADD', KEYS[1], due, ARGV[1])
redis.call('XACK', KEYS[2], ARGV[4], ARGV[5])
keepFor(KEYS[1], existed, tonumber(ARGV[3]))
return due
