-- release.lua: hand back entries a consumer was delivered but never started handling
-- (a graceful stop with deliveries still queued), as if they had not been delivered:
-- each keeps its place in the group's pending list, its delivery count goes back down
-- by the delivery that never ran, and its idle time is set past any claim's min-idle,
-- so that another consumer of the group (its reclaim, a claiming stream) takes it at
-- once, and this consumer, restarted under its name, re-reads it, either way without
-- an attempt spent.
--
-- KEYS[1] -> the stream
-- ARGV[1] -> the consumer group
-- ARGV[2] -> the consumer that owns the entries
-- ARGV[3] -> the idle time to give them, in ms
-- ARGV[4..] -> the entry ids, in any order
--
-- Returns the ids that are no longer pending at ARGV[2] (acknowledged, or claimed by
-- another consumer); those are left alone.
--
-- Atomic: the owner check and the reset cannot be split by another consumer's claim.
--
-- Preludes: acl.lua, pending_at.lua; prepended by script.go.
-- The user's permission for XCLAIM is checked before the first write (acl.lua).
local denied = refused('XCLAIM', KEYS[1], ARGV[1], ARGV[2], '0', '0-1')
if denied then
  return denied
end
local byCount, lost = byCountAt(4, -1)
resetCounts(byCount, ARGV[3])
return lost
