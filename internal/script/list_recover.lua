-- list_recover.lua: recover the items a reliable list consumer left in its processing
-- list when it died (its heartbeat key expired). Go reads the items, decides each one
-- and encodes what replaces it (retry count + 1, or a dead letter); this script checks
-- the heartbeat and moves the bytes.
--
-- KEYS[1] -> the dead consumer's heartbeat key
-- KEYS[2] -> the dead consumer's processing list
-- KEYS[3] -> the source list (recovered items go back to its tail)
-- KEYS[4] -> the dead-letter list (the source list again when the mount has none)
-- KEYS[5] -> the set of consumer names of the source list
-- ARGV[1] -> "1": do nothing while KEYS[1] exists; "0": recover regardless (a consumer
--            recovering its own processing list at start)
-- ARGV[2] -> the dead consumer's name (a member of KEYS[5])
-- ARGV[3..] -> triples: the item as it is in KEYS[2]; where it goes: "list" (RPUSH to
--            KEYS[3]), "dead" (RPUSH to KEYS[4]) or "drop" (nowhere); the value to push
--
-- Returns -1 when the consumer is alive (KEYS[1] exists: nothing is done), else an array
-- of the positions (1-based, in the order of the triples) of the items taken out of
-- KEYS[2]: an item no longer there is skipped, so the caller knows exactly which values
-- were pushed even when another consumer raced it. When KEYS[2] is left empty, ARGV[2]
-- is removed from KEYS[5].
--
-- Atomic: the heartbeat check, every removal and every push are one step, and a value is
-- pushed only if its item was removed, so two consumers recovering the same orphan never
-- duplicate an item.
--
-- Prelude: acl.lua; prepended by script.go.
if ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  return -1
end
for i = 2, 4 do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= 'list' and kind ~= 'none' then
    return redis.error_reply('WRONGTYPE key ' .. KEYS[i] .. ' holds a ' .. kind .. ', not a list')
  end
end
local denied = refusedAny({{'LREM', KEYS[2], '1', 'v'}, {'RPUSH', KEYS[3], 'v'}, {'RPUSH', KEYS[4], 'v'}, {'SREM', KEYS[5], 'm'}})
if denied then
  return denied -- checked before the first write (acl.lua)
end
local moved = {}
for i = 3, #ARGV, 3 do
  if redis.call('LREM', KEYS[2], 1, ARGV[i]) == 1 then
    moved[#moved + 1] = (i - 3) / 3 + 1
    if ARGV[i + 1] == 'list' then
      redis.call('RPUSH', KEYS[3], ARGV[i + 2])
    elseif ARGV[i + 1] == 'dead' then
      redis.call('RPUSH', KEYS[4], ARGV[i + 2])
    end
  end
end
if redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('SREM', KEYS[5], ARGV[2])
end
return moved
