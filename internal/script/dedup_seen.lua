-- dedup_seen: which dedup keys have a live completion mark (settle.Dedupe), read before a
-- delivery's handler runs. It writes nothing.
--
-- KEYS[1] -> the mark set (a sorted set scored by the time in ms each mark ends)
--
-- ARGV[1] -> "now" in ms (a test's fake clock); empty: the server's TIME
-- ARGV[2..] -> the dedup keys (at most 512: one ZMSCORE reads them)
--
-- Returns one reply per key, in order: 1 when its mark ends after now, else 0; or an
-- error reply when KEYS[1] holds another type.
--
-- Prelude: now.lua; prepended by script.go.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'zset' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a zset')
end
local now = nowMs(ARGV[1])
local out = {}
if #ARGV < 2 then
  return out
end
local ends = redis.call('ZMSCORE', KEYS[1], unpack(ARGV, 2))
for i = 1, #ARGV - 1 do
  if ends[i] and tonumber(ends[i]) > now then
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
