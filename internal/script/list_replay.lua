-- list_replay.lua: move one dead letter of a dead-letter list back: remove the exact
-- member from the dead-letter list and append the rewritten value (its headers rewritten
-- by Go) to the destination list, in one step. An operator's list replay calls it once
-- per dead letter.
--
-- KEYS[1] -> the destination list (where the message goes back to; may not exist yet)
-- KEYS[2] -> the dead-letter list
-- ARGV[1] -> the dead letter: the member of KEYS[2], byte for byte
-- ARGV[2] -> the value to append to KEYS[1], encoded by Go
--
-- Returns the destination's length after the push; or false (nil) when the member is no
-- longer in KEYS[2] (replayed or purged already): LREM removed 0 and nothing is written,
-- so a replay run again moves nothing twice. A destination or a dead-letter key that is
-- not a list fails with an error reply before anything is written.
--
-- Prelude: acl.lua; prepended by script.go.
local function isList(key, what, missingOK)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'list' or (kind == 'none' and missingOK) then
    return nil
  end
  if kind == 'none' then
    return redis.error_reply('NOKEY the ' .. what .. ' ' .. key .. ' does not exist')
  end
  return redis.error_reply('WRONGTYPE the ' .. what .. ' ' .. key .. ' holds a ' .. kind .. ', not a list')
end
local bad = isList(KEYS[2], 'dead-letter list', true) or isList(KEYS[1], 'destination', true) or
  refusedAny({{'LREM', KEYS[2], '1', 'v'}, {'RPUSH', KEYS[1], 'v'}}) -- before any write
if bad then
  return bad
end
if redis.call('LREM', KEYS[2], 1, ARGV[1]) == 0 then
  return false
end
return redis.call('RPUSH', KEYS[1], ARGV[2])
