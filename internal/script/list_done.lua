-- list_done.lua: take a batch of completed items out of a reliable list consumer's
-- processing list (what an LREM per item did, in a few commands per batch).
--
-- KEYS[1] -> the processing list
-- KEYS[2] -> (settle.Dedupe only) the mark set, in KEYS[1]'s slot (dedup.lua)
-- ARGV -> the items (at most 1,000, so that the head read below stays within the 4,000
--         values Lua unpacks into one LPUSH), each removed once, byte for byte (which
--         of two equal items goes cannot be told apart). With KEYS[2]: "now" in ms (empty:
--         the server's TIME), the window in ms, the n items, then n dedup keys ("" for
--         none), the mark of an item's key written if and only if this call removed it
--
-- Returns one reply per item, in order: 1 when it was removed; 0 when it was no longer
-- in the list (orphan recovery took it: this consumer's heartbeat lapsed).
--
-- How: items complete in about the order they were taken, so they sit near the head of
-- the list. One LRANGE reads its head (twice as many items as the batch, and 64 more);
-- of the items found there, the first q positions (up to the last one removed) go in one
-- LTRIM, and those of them that stay are put back in front, in order, in one LPUSH. An
-- item not found in the head is removed by an LREM of its own, from the tail (count -1):
-- past the head, the newest takes are nearer the tail, and the head may hold a long run
-- of deliveries still waiting (retries waiting out a delay in the process), which an
-- LREM from the head walked for every item (80 µs each behind 20,000 waiting). A batch
-- settled in order costs LRANGE + LTRIM.
--
-- All or nothing: the user's permissions are checked first (acl.lua) and LRANGE fails
-- the call, before any write, on a key of the wrong type. LTRIM is then the first write
-- and cannot fail; the LPUSH after it cannot either (a list, permitted, and a script's
-- commands after its first write are not refused for memory), nor can an LREM.
--
-- Preludes: acl.lua, now.lua, expiry.lua, dedup.lua; prepended by script.go.
local proc = KEYS[1]
local denied = refusedAny({{'LTRIM', proc, '0', '-1'}, {'LPUSH', proc, 'v'}, {'LREM', proc, '1', 'v'}})
local items, marked, now, window = ARGV, nil, 0, 0
if KEYS[2] then
  window = tonumber(ARGV[2])
  denied = denied or refusedMarks(KEYS[2], window)
  local n = (#ARGV - 2) / 2
  items, marked = {unpack(ARGV, 3, 2 + n)}, {unpack(ARGV, 3 + n, 2 + 2 * n)}
end
if denied then
  return denied
end
if marked then
  now = nowMs(ARGV[1])
end

local want = {} -- item -> how many of the batch are still to be found
for _, v in ipairs(items) do
  want[v] = (want[v] or 0) + 1
end
local head = redis.call('LRANGE', proc, 0, 2 * #items + 63)
local found, last, kept = {}, 0, {} -- found: item -> count removed from the head
for pos, v in ipairs(head) do
  local w = want[v]
  if w and w > 0 then
    want[v] = w - 1
    found[v] = (found[v] or 0) + 1
    last = pos
  else
    kept[#kept + 1] = pos
  end
end

if last > 0 then
  redis.call('LTRIM', proc, last, -1)
  local back = {}
  for k = #kept, 1, -1 do
    local pos = kept[k]
    if pos < last then
      back[#back + 1] = head[pos]
    end
  end
  if #back > 0 then
    redis.call('LPUSH', proc, unpack(back))
  end
end

local replies = {}
for i, v in ipairs(items) do
  local n = found[v]
  if n and n > 0 then
    found[v] = n - 1
    replies[i] = 1
  else
    replies[i] = redis.call('LREM', proc, -1, v)
  end
end
if marked then
  local keys = {}
  for i, k in ipairs(marked) do
    if replies[i] == 1 and k ~= '' then
      keys[#keys + 1] = k
    end
  end
  markDone(KEYS[2], now, window, keys)
end
return replies
