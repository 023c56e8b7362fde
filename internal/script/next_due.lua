-- next_due.lua: the function the delay set sweeps share to end with; it is prepended to
-- each when the script is loaded (see script.go).

-- nextDue returns the earliest due time (score, in ms) still in the delay set key, or -1
-- when it is empty: the caller bounds its next block by it.
local function nextDue(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first == 2 then
    return tonumber(first[2])
  end
  return -1
end
