-- claim.lua: take entries of a consumer group that have been idle at least min-idle
-- over to one consumer (XAUTOCLAIM), and report how many times Redis has delivered each
-- (XPENDING), so one round trip gives both the entries and their delivery counts.
--
-- KEYS[1] -> the stream
-- ARGV[1] -> the consumer group
-- ARGV[2] -> the consumer that takes the entries over
-- ARGV[3] -> min-idle in milliseconds
-- ARGV[4] -> the XAUTOCLAIM cursor: the lowest id to look at ("0-0" for the start)
-- ARGV[5] -> the most entries to claim (XAUTOCLAIM scans at most ten times as many)
--
-- Returns {next cursor ("0-0" once the whole pending list was scanned),
--          claimed entries as XRANGE returns them,
--          the delivery count of each claimed entry (the claim included), in the same order,
--          ids that were pending but deleted from the stream (Redis 7: XAUTOCLAIM has
--          already removed them from the pending list)}.
--
-- Atomic with respect to other consumers: a count is read right after its entry was
-- claimed, before any other client can claim or acknowledge it.
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
local entries, counts = {}, {}
for _, e in ipairs(r[2]) do
  -- Redis 6.2 reports an entry deleted from the stream as a nil; skip it.
  if e then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
    entries[#entries + 1] = e
    if p[1] then
      counts[#counts + 1] = p[1][4]
    else
      counts[#counts + 1] = 1
    end
  end
end
return {r[1], entries, counts, r[3] or {}}
