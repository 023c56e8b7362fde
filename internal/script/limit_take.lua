-- limit_take.lua: let one delivery start under every flow limit of its mount, now or at
-- a time it reserves, or tell how long it must wait: all of its limits are checked
-- first and, only if every one admits it, all are taken, so a refused delivery takes
-- nothing.
--
-- KEYS[i] -> limit i's state: a rate limit's theoretical arrival time (a string, in µs),
--            or a concurrency limit's leases (a sorted set: token -> lease end in ms)
-- ARGV[1] -> now in ms, or "" for the server's TIME (in µs)
-- ARGV[2] -> the token the delivery holds its concurrency slots by (unique per start)
-- ARGV[3] -> the reservation horizon in µs: a delivery whose rate limits let it start
--            within it takes its place now and starts then, without asking again
-- ARGV[3+4(i-1)+1..4] -> limit i: "rate", its emission interval in µs, its tolerance in
--            µs (the burst less one, times the interval), unused; or "slots", its slot
--            count, the lease in ms, unused
--
-- Returns 0 when the delivery may start now, else {wait in µs, i, reserved}: reserved 1
-- when it took its place (its rate limits' arrival times moved on, its slots leased to
-- ARGV[2]) and starts once wait has passed; reserved 0 when it took nothing and must
-- ask again after wait (limit i asks the longest wait; a concurrency limit's is when its
-- earliest lease ends, an upper bound: a release frees a slot sooner; a rate limit's is
-- when a reservation within the horizon becomes possible).
--
-- Rate limits are GCRA: a key stores one number, and it expires once its arrival time
-- has passed, so an idle key costs nothing. Reserving, rather than answering "ask again
-- at t" to every waiting delivery, keeps the deliveries waiting for one rate limit from
-- all asking at once when it comes due: each is given its own start. Leases expire on
-- their own: an expired one is removed before a slot is counted, and the set expires
-- when its last lease would.
--
-- Atomic: the check and the take cannot be split by another process's take.
local nowUs
if tonumber(ARGV[1]) then
  nowUs = tonumber(ARGV[1]) * 1000
else
  local t = redis.call('TIME')
  nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local now = math.floor(nowUs / 1000)
local horizon = tonumber(ARGV[3])
local slotWait, slotWhich = 0, 0
local rateWait, rateWhich = 0, 0
local tats = {}
for i = 1, #KEYS do
  local kind = ARGV[3 + 4 * (i - 1) + 1]
  local a = tonumber(ARGV[3 + 4 * (i - 1) + 2])
  local b = tonumber(ARGV[3 + 4 * (i - 1) + 3])
  if kind == 'rate' then
    local tat = tonumber(redis.call('GET', KEYS[i])) or nowUs
    if tat < nowUs then
      tat = nowUs
    end
    if tat - nowUs - b > rateWait then
      rateWait, rateWhich = tat - nowUs - b, i
    end
    tats[i] = {tat, a}
  else
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    if redis.call('ZCARD', KEYS[i]) >= a then
      local first = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
      local w = math.max(tonumber(first[2]) - now, 1) * 1000
      if w > slotWait then
        slotWait, slotWhich = w, i
      end
    end
  end
end
if slotWhich > 0 then
  return {slotWait, slotWhich, 0}
end
if rateWait > horizon then
  return {rateWait - horizon, rateWhich, 0}
end
-- The start is at now + rateWait: each rate limit's next arrival counts from the later
-- of its own and that start (a limit that alone would have let the delivery start
-- sooner must not count it as started then).
local startUs = nowUs + math.max(rateWait, 0)
for i = 1, #KEYS do
  if tats[i] then
    local tat = math.max(tats[i][1], startUs) + tats[i][2]
    redis.call('SET', KEYS[i], string.format('%d', tat), 'PX', math.ceil((tat - nowUs) / 1000) + 1)
  else
    local lease = tonumber(ARGV[3 + 4 * (i - 1) + 3])
    redis.call('ZADD', KEYS[i], now + lease + math.ceil(rateWait / 1000), ARGV[2])
    local last = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', KEYS[i], math.max(tonumber(last[2]) - now, 1))
  end
end
if rateWait > 0 then
  return {rateWait, rateWhich, 1}
end
return 0
