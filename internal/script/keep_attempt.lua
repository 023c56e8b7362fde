-- keep_attempt.lua: record, in a pending entry's delivery count, the attempts spent on it
-- in place (an Ordered retry runs the entry again without reading it again, so Redis's
-- count would stay at its first delivery): a consumer that reads it again after a crash
-- or a stop counts from there, as it counts any re-read entry.
--
-- KEYS[1] -> the stream
-- ARGV[1] -> the consumer group
-- ARGV[2] -> the consumer that must hold the entry pending
-- ARGV[3] -> the entry id
-- ARGV[4] -> the delivery count to set
--
-- Returns 1; or an error reply "NOTOWNER …" when the entry is not pending to ARGV[2]
-- (another consumer took it over, or it was settled): nothing is changed.
--
-- Atomic: the owner check and the XCLAIM to the same consumer (JUSTID, no min idle,
-- RETRYCOUNT) cannot be split by another consumer's claim.
--
-- Prelude: acl.lua; prepended by script.go.
local denied = refused('XCLAIM', KEYS[1], ARGV[1], ARGV[2], '0', '0-1')
if denied then
  return denied
end
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2]) == 0 then
  return redis.error_reply('NOTOWNER entry ' .. ARGV[3] .. ' is not pending to consumer ' .. ARGV[2])
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', ARGV[4], 'JUSTID')
return 1
