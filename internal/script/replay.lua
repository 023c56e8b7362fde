-- replay.lua: move one dead letter back: append a new entry (its headers rewritten by Go)
-- to a destination stream and delete the dead letter from the dead-letter stream, in one
-- step. An operator's replay calls it once per dead letter.
--
-- KEYS[1] -> the destination stream (where the message goes back to)
-- KEYS[2] -> the dead-letter stream
-- ARGV[1] -> the id of the dead letter in KEYS[2]
-- ARGV[2..] -> the new entry's field/value pairs, encoded by Go
--
-- Returns the new entry's id; or false (nil) when the dead letter is no longer in KEYS[2]
-- (replayed or purged already): nothing is written, so a replay run again moves nothing
-- twice. A destination that is missing or not a stream, or a dead-letter key that is
-- not a stream, fails with an error reply before anything is written.
--
-- Atomic: the XADD and the XDEL cannot be split, and Redis streams are append-only, so
-- the fields Go read from the dead letter are still its fields when it is there.
--
-- Prelude: acl.lua; prepended by script.go.
local function isStream(key, what)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'stream' then
    return nil
  end
  if kind == 'none' then
    return redis.error_reply('NOKEY the ' .. what .. ' ' .. key .. ' does not exist')
  end
  return redis.error_reply('WRONGTYPE the ' .. what .. ' ' .. key .. ' holds a ' .. kind .. ', not a stream')
end
local bad = isStream(KEYS[2], 'dead-letter stream') or isStream(KEYS[1], 'destination') or
  refusedAny({{'XADD', KEYS[1], '*', 'f', 'v'}, {'XDEL', KEYS[2], ARGV[1]}}) or tooMany(#ARGV - 1) -- before any write
if bad then
  return bad
end
if #redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1]) == 0 then
  return false
end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
redis.call('XDEL', KEYS[2], ARGV[1])
return id
