-- now.lua: the function every script that needs the time shares; it is prepended to each
-- when the script is loaded (see script.go).

-- nowMs returns the time in ms since the epoch: given, an ARGV "now" in ms (a test's fake
-- clock), when it is a number; else (empty or nil) the server's TIME.
local function nowMs(given)
  local now = tonumber(given)
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
