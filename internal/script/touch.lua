-- touch.lua: reset the idle time of entries still pending at one consumer, keeping
-- their delivery counts, so that no other consumer claims them (a heartbeat for entries
-- whose handlers still run, and the restart of a left-pending retry's min-idle wait).
--
-- KEYS[1] -> the stream
-- ARGV[1] -> the consumer group
-- ARGV[2] -> the consumer that owns the entries
-- ARGV[3..] -> the entry ids
--
-- Returns the ids that are no longer pending at ARGV[2] (acknowledged, or claimed by
-- another consumer); those are left alone.
--
-- XCLAIM … JUSTID alone keeps the count on Redis but not on miniredis, so the count read
-- by XPENDING is written back with RETRYCOUNT: the count is kept on both. Atomic: the
-- owner check and the reset cannot be split by another consumer's claim.
local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if p[1] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'IDLE', 0, 'RETRYCOUNT', p[1][4], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
