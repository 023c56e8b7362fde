-- pending_release.lua: release pending entries of a consumer to the group, as an
-- operator asks (a stuck entry, a consumer that died): as release.lua does for a
-- consumer's own undelivered entries, each keeps its place in the pending list, its
-- delivery count goes back down by one, and its idle time is set past any claim's
-- min-idle, so that a consumer of the group takes it at once without an attempt spent.
-- Unlike release.lua, an entry already released (its idle at or past ARGV[3]: not
-- delivered, claimed or touched since) is left alone, so a release asked for twice
-- takes one delivery off, not two.
--
-- KEYS[1] -> the stream
-- ARGV[1] -> the consumer group
-- ARGV[2] -> the consumer that holds the entries
-- ARGV[3] -> the idle time to give them, in ms
-- ARGV[4..] -> the entry ids, in any order
--
-- Returns {released ids, ids already released, ids no longer pending at ARGV[2]}; only
-- the first were changed.
--
-- Atomic: the owner check and the reset cannot be split by another consumer's claim.
--
-- Preludes: acl.lua, pending_at.lua; prepended by script.go.
-- The user's permission for XCLAIM is checked before the first write (acl.lua).
local denied = refused('XCLAIM', KEYS[1], ARGV[1], ARGV[2], '0', '0-1')
if denied then
  return denied
end
local ids = {}
for i = 4, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
local found = pendingAt(ids, #ids + 16)
local idle = tonumber(ARGV[3])
local byCount, released, already, lost = {}, {}, {}, {}
for _, id in ipairs(ids) do
  local p = found[id]
  if not p then
    lost[#lost + 1] = id
  elseif tonumber(p[1]) >= idle then
    already[#already + 1] = id
  else
    local n = math.max(tonumber(p[2]) - 1, 0)
    byCount[n] = byCount[n] or {}
    table.insert(byCount[n], id)
    released[#released + 1] = id
  end
end
resetCounts(byCount, ARGV[3])
return {released, already, lost}
