-- lease.lua: take, renew or hand back a member's lease on one partition of a partitioned
-- stream, with a fencing token that grows at each new holder.
--
-- KEYS[1] -> the lease (a hash: owner, token, until in ms); never expires, so that its
--            token only grows
-- ARGV[1] -> the member
-- ARGV[2] -> the token the member holds ("" for none)
-- ARGV[3] -> how long the lease lasts from now (ms)
-- ARGV[4] -> now in ms ("" for the server's TIME)
-- ARGV[5] -> "take" (take or renew) or "drop" (hand back at once)
--
-- take returns {1, token} when the member held it with that token (renewed), {2, token}
-- with a new token when it took it (free, run out, or held by it under another token: a
-- restart), {0, owner} when another member holds it. drop returns {1, token} when the
-- member held it with that token (it is free now), else {0, owner}.
--
-- Atomic: at most one member holds a lease at any time of the server's clock, and each
-- holding has its own token.
--
-- Prelude: now.lua (nowMs), prepended by script.go.
local now = nowMs(ARGV[4])
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'until')
local owner, token, till = cur[1] or '', cur[2] or '0', tonumber(cur[3] or '0') or 0
local mine = owner == ARGV[1] and token == ARGV[2] and ARGV[2] ~= ''
if ARGV[5] == 'drop' then
  if mine then
    redis.call('HSET', KEYS[1], 'owner', '', 'until', 0)
    return {1, token}
  end
  return {0, owner}
end
if mine then
  redis.call('HSET', KEYS[1], 'until', now + tonumber(ARGV[3]))
  return {1, token}
end
if owner == '' or owner == ARGV[1] or till <= now then
  local t = redis.call('HINCRBY', KEYS[1], 'token', 1)
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'until', now + tonumber(ARGV[3]))
  return {2, tostring(t)}
end
return {0, owner}
