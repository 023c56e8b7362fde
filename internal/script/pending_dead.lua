-- pending_dead.lua: dead-letter one pending entry of a stream's consumer group now, as an
-- operator asks: append the dead letter (its fields and settle's dead-letter headers,
-- encoded by Go from the entry) to the dead-letter stream and acknowledge the entry, in
-- one step.
--
-- KEYS[1] -> the stream
-- KEYS[2] -> the dead-letter stream (made when missing, as settle's DeadLetter does)
-- ARGV[1] -> the consumer group of KEYS[1]
-- ARGV[2] -> the id of the pending entry
-- ARGV[3..] -> the dead letter's field/value pairs, encoded by Go
--
-- Returns the dead letter's id; or false (nil) when the entry is no longer pending in
-- the group (acknowledged, or dead-lettered already): nothing is written, so a dead
-- letter asked for twice is written once. A stream that is not a stream with that group,
-- or a dead-letter key of another type, fails with an error reply before anything is
-- written.
--
-- Atomic: the pending check, the XADD and the XACK cannot be split, so the consumer
-- that holds the entry cannot settle it in between (its own settlement then finds it
-- no longer pending to it and writes nothing).
--
-- Prelude: acl.lua; prepended by script.go.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'stream' then
  return redis.error_reply('WRONGTYPE the stream ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a stream')
end
kind = redis.call('TYPE', KEYS[2])['ok']
if kind ~= 'stream' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE the dead-letter stream ' .. KEYS[2] .. ' holds a ' .. kind .. ', not a stream')
end
local bad = refusedAny({{'XADD', KEYS[2], '*', 'f', 'v'}, {'XACK', KEYS[1], ARGV[1], ARGV[2]}}) or tooMany(#ARGV - 2)
if bad then
  return bad -- before any write
end
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then
  return false
end
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return id
