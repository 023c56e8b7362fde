-- stream_done: acknowledge entries of a stream group and mark the dedup keys of those
-- acknowledged completed (settle.Dedupe), in one atomic step: an entry's mark is written
-- if and only if this call acknowledged it.
--
-- KEYS[1] -> the stream
-- KEYS[2] -> the mark set (a sorted set in KEYS[1]'s slot, scored by each mark's end in ms)
--
-- ARGV[1] -> the consumer group
-- ARGV[2] -> "now" in ms (a test's fake clock); empty: the server's TIME
-- ARGV[3] -> the window in ms (a mark ends that long after now)
-- ARGV[4..] -> pairs: an entry id, then its dedup key ("" for none)
--
-- Returns one reply per entry, in order: 1 when it was acknowledged here, 0 when it was
-- not pending (already acknowledged); or an error reply, with nothing written, when a key
-- holds another type or the user may not run a write (checked before the first write).
--
-- Preludes: acl.lua, now.lua, expiry.lua, dedup.lua; prepended by script.go.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'stream' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a stream')
end
local window = tonumber(ARGV[3])
local denied = refusedMarks(KEYS[2], window) or refused('XACK', KEYS[1], ARGV[1], '0-1')
if denied then
  return denied
end
local now = nowMs(ARGV[2])
local out, marks = {}, {}
for i = 4, #ARGV - 1, 2 do
  local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  out[#out + 1] = n
  if n == 1 and ARGV[i + 1] ~= '' then
    marks[#marks + 1] = ARGV[i + 1]
  end
end
markDone(KEYS[2], now, window, marks)
return out
