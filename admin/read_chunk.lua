-- read_chunk.lua: a piece of one field of one stream entry, so that a payload of any
-- size is read in pieces of bounded size (a download of the whole).
--
-- KEYS[1] -> the stream
-- ARGV[1] -> the entry id
-- ARGV[2] -> the field ("payload")
-- ARGV[3] -> offset: bytes to skip
-- ARGV[4] -> n: at most this many bytes
--
-- Returns {piece, full length} ; {false, -1} when the entry or the field is not there.
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #e == 0 then
  return {false, -1}
end
local f = e[1][2]
for j = 1, #f, 2 do
  if f[j] == ARGV[2] then
    local v = f[j + 1]
    local off = tonumber(ARGV[3])
    return {string.sub(v, off + 1, off + tonumber(ARGV[4])), #v}
  end
end
return {false, -1}
