-- touch.lua: reset the idle time of entries still pending at one consumer, keeping
-- their delivery counts, so that no other consumer claims them (a heartbeat for entries
-- whose handlers still run, and the restart of left-pending retries' min-idle wait).
--
-- KEYS[1] -> the stream
-- ARGV[1] -> the consumer group
-- ARGV[2] -> the consumer that owns the entries
-- ARGV[3..] -> the entry ids, in any order
--
-- Returns the ids that are no longer pending at ARGV[2] (acknowledged, or claimed by
-- another consumer); those are left alone.
--
-- One XPENDING over the ids' range (pendingAt, in pending_at.lua) finds which are still
-- pending there and their delivery counts; then one XCLAIM … IDLE 0 JUSTID per distinct
-- count resets them: JUSTID alone keeps the count on Redis but not on miniredis, so the
-- count read by XPENDING is written back with RETRYCOUNT, and it is kept on both.
-- Atomic: the owner check and the reset cannot be split by another consumer's claim.
--
-- Preludes: acl.lua, pending_at.lua; prepended by script.go.
-- The user's permission for XCLAIM is checked before the first write (acl.lua).
local denied = refused('XCLAIM', KEYS[1], ARGV[1], ARGV[2], '0', '0-1')
if denied then
  return denied
end
local byCount, lost = byCountAt(3, 0)
resetCounts(byCount, 0)
return lost
