-- delay_promote.lua: make members of a durable delay set due now, as an operator asks,
-- so that the next sweep (before a consumer's next read) moves them back.
--
-- KEYS[1] -> the delay set (a sorted set scored by due time in ms)
-- ARGV[1] -> "now" in ms (a test's fake clock); empty: the server's TIME
-- ARGV[2..] -> the members
--
-- Returns one code per member, in order: 1 when it was given the score now; 0 when it was
-- due at now already (left as it was); -1 when it is not in the set (swept or cancelled
-- already). A member promoted twice is promoted once: the second time it is due already.
--
-- Atomic: a member is not swept between its check and its new score (ZADD XX never adds
-- one back).
--
-- Preludes: acl.lua, now.lua; prepended by script.go.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'zset' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE the delay set ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a zset')
end
local denied = refused('ZADD', KEYS[1], 'XX', '0', 'm')
if denied then
  return denied -- before any write (acl.lua)
end
local now = nowMs(ARGV[1])
local codes = {}
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if not score then
    codes[#codes + 1] = -1
  elseif tonumber(score) <= now then
    codes[#codes + 1] = 0
  else
    redis.call('ZADD', KEYS[1], 'XX', now, ARGV[i])
    codes[#codes + 1] = 1
  end
end
return codes
