-- idempotent_publish: append an entry to a stream unless its idempotency key was
-- published within the window (settle.IdempotencyKey), in one atomic step: the first
-- publish of a key writes the entry and remembers its id; a later one writes nothing
-- and answers that id.
--
-- KEYS[1] -> the stream
-- KEYS[2] -> the key's mark (a string holding the first entry's id, in KEYS[1]'s slot)
--
-- ARGV[1] -> the window in ms (how long the mark lives)
-- ARGV[2] -> the trim: "" for none, "MAXLEN" (approximate) or "MINID" (exact)
-- ARGV[3] -> the trim's argument (ignored without a trim)
-- ARGV[4..] -> the entry's field/value pairs, encoded by Go
--
-- Returns {1, id} when the entry was written, {0, id} when the key was published
-- already (id: the first entry's); or an error reply, with nothing written, when a key
-- holds another type or the user may not run a write (checked before the first write).
--
-- Prelude: acl.lua; prepended by script.go.
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind ~= 'string' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds a ' .. kind .. ', not a string')
end
local first = redis.call('GET', KEYS[2])
if first then
  return {0, first}
end
local denied = wrongType(KEYS[1], 'stream') or tooMany(#ARGV - 3) or
  refusedAny({{'XADD', KEYS[1], '*', 'f', 'v'}, {'SET', KEYS[2], 'v', 'PX', ARGV[1]}})
if denied then
  return denied
end
local fields = {unpack(ARGV, 4)}
local id
if ARGV[2] == 'MAXLEN' then
  id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', unpack(fields))
elseif ARGV[2] == 'MINID' then
  id = redis.call('XADD', KEYS[1], 'MINID', ARGV[3], '*', unpack(fields))
else
  id = redis.call('XADD', KEYS[1], '*', unpack(fields))
end
redis.call('SET', KEYS[2], id, 'PX', ARGV[1])
return {1, id}
