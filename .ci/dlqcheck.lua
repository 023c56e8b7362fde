-- dlqcheck.lua: counts the entries of a dead-letter stream that do not carry the retry
-- count of the refunds example's cap (5) and every dead-letter header. Read-only.
--
-- KEYS[1] -> the dead-letter stream (refunds.dlq)
-- returns   the number of entries that fail the check (0 when all pass)
local bad = 0
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
  local fields = entry[2]
  local h = {}
  for i = 1, #fields, 2 do
    h[fields[i]] = fields[i + 1]
  end
  if h['settle-retry-count'] ~= '5'
    or not h['settle-dead-source'] or h['settle-dead-source'] == ''
    or not h['settle-dead-id'] or h['settle-dead-id'] == ''
    or not h['settle-dead-reason'] or h['settle-dead-reason'] == ''
    or h['settle-dead-error'] == nil then
    bad = bad + 1
  end
end
return bad
