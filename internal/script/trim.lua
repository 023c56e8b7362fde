-- trim: remove the entries of a stream that every consumer group has acknowledged and
-- that are older than a retention, in one atomic step: the groups are read and the
-- stream trimmed by the same script, so a group created, or an entry delivered, in
-- between cannot lose an entry.
--
-- KEYS[1] -> the stream
--
-- ARGV[1] -> "now" in ms (a test's fake clock); empty: the server's TIME
-- ARGV[2] -> the retention in ms: entries younger than now - ARGV[2] (by their id's
--            time) stay
--
-- A group protects every entry from its oldest pending one (XPENDING's summary) on, or,
-- with nothing pending, from its last-delivered id on (that entry itself is kept: its id
-- is the bound XTRIM MINID keeps). The bound is the least over every group and the
-- retention; a stream with no group (or no stream) is not trimmed, since whoever reads
-- it is unknown. A group that does not exist yet protects nothing.
--
-- A dead-letter stream is never trimmed here, whoever reads it: a review mount's group
-- acknowledges every dead letter, and they must stay until an operator purges or
-- replays them (or the writers' DeadLetterMaxLen bounds the stream). A stream is taken
-- for one when its oldest entry, or the newest entry the bound would remove, carries a
-- settle-dead-* field: two reads, whatever the stream's length.
--
-- Returns {entries trimmed, the bound used or "" when nothing was trimmed}.
--
-- Prelude: now.lua (nowMs), prepended by script.go.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then
  return {0, ''}
end

local function parse(id)
  local dash = string.find(id, '-', 1, true)
  if not dash then
    return tonumber(id), 0
  end
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end

local function less(a, b)
  local ams, aseq = parse(a)
  local bms, bseq = parse(b)
  return ams < bms or (ams == bms and aseq < bseq)
end

local function deadLetter(entries)
  local e = entries[1]
  if not e then
    return false
  end
  local fields = e[2]
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 11) == 'settle-dead' then
      return true
    end
  end
  return false
end

local bound = string.format('%.0f', math.max(0, nowMs(ARGV[1]) - tonumber(ARGV[2]))) .. '-0'
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then
  return {0, ''}
end
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do
    info[g[i]] = g[i + 1]
  end
  local keep = info['last-delivered-id']
  if tonumber(info['pending']) > 0 then
    local summary = redis.call('XPENDING', KEYS[1], info['name'])
    keep = summary[2]
  end
  if less(keep, bound) then
    bound = keep
  end
end

if bound == '0-0' then
  return {0, ''} -- nothing lies below it
end
if deadLetter(redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)) or
  deadLetter(redis.call('XREVRANGE', KEYS[1], '(' .. bound, '-', 'COUNT', 1)) then
  return {0, ''}
end

local trimmed = redis.call('XTRIM', KEYS[1], 'MINID', bound)
if trimmed == 0 then
  return {0, ''}
end
return {trimmed, bound}
