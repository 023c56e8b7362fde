-- read_cut.lua: a read-only page of a stream with every field value cut, so that a
-- listing costs O(page) memory in the client whatever the entries hold (a 128 MiB
-- payload is read by Redis, never sent).
--
-- KEYS[1] -> the stream
-- ARGV[1] -> start id (XRANGE syntax: "-", "(id", "<ms>")
-- ARGV[2] -> end id ("+", "<id>")
-- ARGV[3] -> count: at most this many entries
-- ARGV[4] -> cut: each value is cut to its first cut bytes
-- ARGV[5] -> "rev" for XREVRANGE (then ARGV[1] is the end and ARGV[2] the start, as
--            XREVRANGE takes them), else XRANGE
-- ARGV[6..] -> the fields to return (none given: every field)
--
-- Returns one reply per entry: {id, {name1, value1 cut, full length of value1, ...}}.
local cmd = 'XRANGE'
if ARGV[5] == 'rev' then
  cmd = 'XREVRANGE'
end
local cut = tonumber(ARGV[4])
local keep = nil
if #ARGV > 5 then
  keep = {}
  for k = 6, #ARGV do
    keep[ARGV[k]] = true
  end
end
local entries = redis.call(cmd, KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[3])
local out = {}
for i, e in ipairs(entries) do
  local f = e[2]
  local g = {}
  for j = 1, #f, 2 do
    if keep == nil or keep[f[j]] then
      local v = f[j + 1]
      g[#g + 1] = f[j]
      g[#g + 1] = string.sub(v, 1, cut)
      g[#g + 1] = #v
    end
  end
  out[i] = {e[1], g}
end
return out
