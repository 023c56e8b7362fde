-- claim.lua: take entries of a consumer group that have been idle at least min-idle
-- over to one consumer, and report how many times Redis has delivered each (XPENDING),
-- so one round trip gives both the entries and their delivery counts. The entries are
-- either the next idle ones of the group's pending list (XAUTOCLAIM from a cursor) or
-- those of the listed ones still pending at ARGV[2] and idle long enough (XCLAIM: a
-- consumer's own left-pending retries, once due; their idle times are checked here, as
-- miniredis's XCLAIM ignores min-idle).
--
-- KEYS[1] -> the stream
-- ARGV[1] -> the consumer group
-- ARGV[2] -> the consumer that takes the entries over
-- ARGV[3] -> min-idle in milliseconds
-- ARGV[4] -> the XAUTOCLAIM cursor: the lowest id to look at ("0-0" for the start), or
--            "" to claim the ids listed after the ones in flight
-- ARGV[5] -> the most entries to claim (each XAUTOCLAIM scans at most ten times as
--            many; the script calls it again while it claims nothing, see scanBudget)
-- ARGV[6] -> n, how many ids in flight follow
-- ARGV[7..6+n] -> ids in flight at ARGV[2]: XAUTOCLAIM may take them (they are idle
--                 enough) but they are not returned, and the delivery count the claim
--                 added is taken back; listed ids in flight are not claimed
-- ARGV[7+n..] -> with ARGV[4] "", the ids to claim (at most ARGV[5])
--
-- Returns {next cursor ("0-0" once the whole pending list was scanned; "" for listed ids),
--          claimed entries as XRANGE returns them,
--          the delivery count of each claimed entry (the claim included), in the same order,
--          ids that were pending but deleted from the stream (Redis 7: XAUTOCLAIM has
--          already removed them from the pending list; XCLAIM of listed ids removes them
--          too, unreported),
--          once a scan's pass is over (next cursor "0-0"), how many entries the group
--          still has pending (XPENDING), else -1}.
--
-- Atomic with respect to other consumers: a count is read right after its entry was
-- claimed, before any other client can claim or acknowledge it. Skipping the ids in flight
-- here inside the script (not after it returns) keeps an entry whose handler settles it
-- while the claim runs from being delivered again.
--
-- The user's permissions for XAUTOCLAIM and XCLAIM are checked before the first write
-- (a claim that took entries and then could not give their counts back would charge
-- the entries in flight here an attempt).
--
-- Preludes: acl.lua, pending_at.lua; prepended by script.go.
local denied = refusedAny({{'XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], '0', '0-0'}, {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], '0', '0-1'}})
if denied then
  return denied
end
local n = tonumber(ARGV[6])
local inflight = {}
for i = 7, 6 + n do
  inflight[ARGV[i]] = true
end

local entries, counts = {}, {}

if ARGV[4] == '' then
  local listed = {}
  for i = 7 + n, #ARGV do
    listed[#listed + 1] = ARGV[i]
  end
  local found = pendingAt(listed, #listed + 16)
  local take, count = {}, {}
  for _, id in ipairs(listed) do
    local p = found[id]
    -- An id listed twice is claimed once (XCLAIM would raise its count twice).
    if p and not inflight[id] and not count[id] and p[1] >= tonumber(ARGV[3]) then
      take[#take + 1] = id
      count[id] = p[2] + 1
    end
  end
  if #take == 0 then
    return {'', {}, {}, {}, -1}
  end
  local args = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3]}
  for _, id in ipairs(take) do
    args[#args + 1] = id
  end
  -- Redis 6.2 reports an entry deleted from the stream as a nil; Redis 7 leaves it out.
  for _, e in ipairs(redis.call(unpack(args))) do
    if e then
      entries[#entries + 1] = e
      counts[#counts + 1] = count[e[1]]
    end
  end
  return {'', entries, counts, {}, -1}
end

-- A scan goes on inside the script while it claims nothing new, up to scanBudget pending
-- entries examined (XAUTOCLAIM examines at most ten per entry it may claim): a lot of one
-- examined ten entries per round trip, so that a pass over a pending list of a few hundred
-- entries in flight (a drain at the defaults) took dozens of calls, each sending the ids
-- in flight again. The budget bounds how long one call holds the server on a long list.
local scanBudget = 1000
local cursor, examined = ARGV[4], 0
local deleted = {}
local back = {}
repeat
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], cursor, 'COUNT', ARGV[5])
  cursor, examined = r[1], examined + 10 * tonumber(ARGV[5])
  for _, id in ipairs(r[3] or {}) do
    deleted[#deleted + 1] = id
  end
  local claimed, ids = {}, {}
  for _, e in ipairs(r[2]) do
    -- Redis 6.2 reports an entry deleted from the stream as a nil; skip it.
    if e then
      claimed[#claimed + 1] = e
      ids[#ids + 1] = e[1]
    end
  end
  local found = {}
  if #ids > 0 then
    found = pendingAt(ids, #ids + 16)
  end
  for _, e in ipairs(claimed) do
    local c = 1
    if found[e[1]] then
      c = found[e[1]][2]
    end
    if inflight[e[1]] then
      local keep = math.max(c - 1, 1)
      back[keep] = back[keep] or {}
      table.insert(back[keep], e[1])
    else
      entries[#entries + 1] = e
      counts[#counts + 1] = c
    end
  end
until #entries > 0 or cursor == '0-0' or examined >= scanBudget
-- Entries in flight here get the count the claim added taken back.
resetCounts(back)
-- A pass that is over says how many entries are still pending: none at all means none can
-- be idle enough before min-idle has passed (see claimer.fetch).
local pending = -1
if cursor == '0-0' then
  pending = redis.call('XPENDING', KEYS[1], ARGV[1])[1]
end
return {cursor, entries, counts, deleted, pending}
