-- list_sweep: move the due members of a durable delay set to the tail of their list
-- (RPUSH, where retry copies go). Atomic: a member is moved (RPUSH + ZREM) exactly once,
-- however many consumers sweep at the same time.
--
-- KEYS[1] -> the delay set (a sorted set scored by due time in ms)
-- KEYS[2] -> the list
--
-- ARGV[1] -> "now" in ms (a test's fake clock); empty: the server's TIME
-- ARGV[2] -> the most members to move (a bounded batch: Go loops while a full one moved)
--
-- A member is "<token>\n<value>" (internal/wire.ValueDelayMember): everything after the
-- first "\n" is pushed as it is. A member without one is not lost: it is pushed whole.
--
-- Returns {moved, next due time in ms or -1 when the set is empty, now in ms}, or an
-- error reply, before anything moved, when the list key holds another type.
--
-- The user's permissions for RPUSH and ZREM (acl.lua) are checked before the first write,
-- so each member is moved whole (RPUSH, then ZREM) or not at all.
--
-- Preludes: acl.lua, now.lua, next_due.lua; prepended by script.go.
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind ~= 'list' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' holds a ' .. kind .. ', not a list')
end

local denied = refusedAny({{'RPUSH', KEYS[2], 'v'}, {'ZREM', KEYS[1], 'm'}})
if denied then
  return denied
end
local now = nowMs(ARGV[1])

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(due) do
  local value = m
  local nl = string.find(m, '\n', 1, true)
  if nl then
    value = string.sub(m, nl + 1)
  end
  redis.call('RPUSH', KEYS[2], value)
  redis.call('ZREM', KEYS[1], m)
end

return {#due, nextDue(KEYS[1]), now}
