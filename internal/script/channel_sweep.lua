-- channel_sweep: publish the due members of a durable delay set to their channel and
-- remove them. Atomic: a member is published (PUBLISH + ZREM) exactly once, however many
-- subscribers sweep at the same time. A channel is not a key: it comes in ARGV.
--
-- KEYS[1] -> the delay set (a sorted set scored by due time in ms)
--
-- ARGV[1] -> "now" in ms (a test's fake clock); empty: the server's TIME
-- ARGV[2] -> the most members to move (a bounded batch: Go loops while a full one moved)
-- ARGV[3] -> the channel
--
-- A member is "<token>\n<value>" (internal/wire.ValueDelayMember): everything after the
-- first "\n" is published as it is. A member without one is published whole.
--
-- Returns {moved, next due time in ms or -1 when the set is empty, now in ms, how many
-- of the moved were received by no subscriber (lost: pub/sub keeps nothing)}.
--
-- The user's permissions for PUBLISH and ZREM (acl.lua) are checked before the first
-- write, so each member is moved whole (PUBLISH, then ZREM) or not at all.
--
-- Preludes: acl.lua, now.lua, next_due.lua; prepended by script.go.
local denied = refusedAny({{'PUBLISH', ARGV[3], 'v'}, {'ZREM', KEYS[1], 'm'}})
if denied then
  return denied
end
local now = nowMs(ARGV[1])

local unheard = 0
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(due) do
  local value = m
  local nl = string.find(m, '\n', 1, true)
  if nl then
    value = string.sub(m, nl + 1)
  end
  if redis.call('PUBLISH', ARGV[3], value) == 0 then
    unheard = unheard + 1
  end
  redis.call('ZREM', KEYS[1], m)
end

return {#due, nextDue(KEYS[1]), now, unheard}
