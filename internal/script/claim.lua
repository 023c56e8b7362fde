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
-- ARGV[6..] -> ids in flight at ARGV[2]: XAUTOCLAIM may take them (they are idle enough)
--              but they are not returned, and the delivery count the claim added is
--              taken back
--
-- Returns {next cursor ("0-0" once the whole pending list was scanned),
--          claimed entries as XRANGE returns them,
--          the delivery count of each claimed entry (the claim included), in the same order,
--          ids that were pending but deleted from the stream (Redis 7: XAUTOCLAIM has
--          already removed them from the pending list)}.
--
-- Atomic with respect to other consumers: a count is read right after its entry was
-- claimed, before any other client can claim or acknowledge it. Skipping the ids in flight
-- here inside the script (not after it returns) keeps an entry whose handler settles it
-- while the claim runs from being delivered again.
local inflight = {}
for i = 6, #ARGV do
  inflight[ARGV[i]] = true
end
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5])
local entries, counts = {}, {}
for _, e in ipairs(r[2]) do
  -- Redis 6.2 reports an entry deleted from the stream as a nil; skip it.
  if e then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
    local n = 1
    if p[1] then
      n = p[1][4]
    end
    if inflight[e[1]] then
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, e[1], 'RETRYCOUNT', math.max(n - 1, 1), 'JUSTID')
    else
      entries[#entries + 1] = e
      counts[#counts + 1] = n
    end
  end
end
return {r[1], entries, counts, r[3] or {}}
