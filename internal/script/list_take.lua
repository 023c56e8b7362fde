-- list_take.lua: move up to a batch of items from the head of a reliable list to the
-- tail of a consumer's processing list, in one call (what an LMOVE per item did).
--
-- KEYS[1] -> the list
-- KEYS[2] -> the consumer's processing list
-- ARGV[1] -> the most items to move (1 to 4,000: what Lua unpacks into one RPUSH)
--
-- Returns the items moved, head first; none when the list is empty.
--
-- All or nothing: the user's permissions are checked first (acl.lua); LRANGE reads the
-- items (a list of the wrong type fails the call there); RPUSH appends them to the
-- processing list, the first write (a processing list of the wrong type, or Redis out
-- of memory, fails the call with nothing written); only then does LTRIM take them off
-- the list, which cannot fail on a list the user may trim. Three commands per batch.
--
-- Prelude: acl.lua; prepended by script.go.
local denied = refusedAny({{'LTRIM', KEYS[1], '0', '-1'}, {'RPUSH', KEYS[2], 'v'}})
if denied then
  return denied
end
local n = tonumber(ARGV[1])
if n < 1 then
  return {}
end
local items = redis.call('LRANGE', KEYS[1], 0, n - 1)
if #items > 0 then
  redis.call('RPUSH', KEYS[2], unpack(items))
  redis.call('LTRIM', KEYS[1], #items, -1)
end
return items
