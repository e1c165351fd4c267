"""The Lua scripts of RedisLimiter: the same checks as windows.py, atomic in Redis, on the server's clock.

Keys of one tenant (all under one hash tag): KEYS[1] the window's sorted set (member -> admit time ms), KEYS[2] its
hash (member -> tokens), KEYS[3] the window's token sum, KEYS[4] the concurrency slots (holder -> lease end ms: one per admit, joins too),
KEYS[5] the charge (fields m member, r reserved, d day, s settled once, n open holders, h:<holder>), KEYS[6] the
prefix of the per-day counters (prefix .. UTC day number; derived keys of the same hash tag).
ARGV[1] is the time in ms, '' for the server's TIME (a test hook: tests pass their own clock).
"""

COMMON = """
local WINDOW, DAY = 60000, 86400000
local function now_ms()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function expire(now)
  local cutoff = now - WINDOW
  while true do
    local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, 500)
    if #old == 0 then return end
    local freed = 0
    for _, amount in ipairs(redis.call('HMGET', KEYS[2], unpack(old))) do freed = freed + (tonumber(amount) or 0) end
    redis.call('ZREM', KEYS[1], unpack(old))
    redis.call('HDEL', KEYS[2], unpack(old))
    redis.call('DECRBY', KEYS[3], freed)
  end
end
local function reset_ms(now)
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #newest == 0 then return 0 end
  return math.max(0, tonumber(newest[2]) + WINDOW - now)
end
"""

ADMIT = (
    COMMON
    + """
-- ARGV: 1 now, 2 tokens, 3 rpm, 4 tpm, 5 concurrency, 6 tokens per day (-1: unlimited), 7 holder, 8 lease ms,
-- 9 the retry ms of a concurrency refusal
local now = now_ms()
local tokens, rpm, tpm, conc, tpd = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
  tonumber(ARGV[6])
local holder, lease = ARGV[7], tonumber(ARGV[8])
expire(now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local count = redis.call('ZCARD', KEYS[1])
local sum = tonumber(redis.call('GET', KEYS[3]) or '0')
local member = redis.call('HGET', KEYS[5], 'm')
if member then  -- a join: counted once, but it runs too, so it holds a concurrency slot of its own
  if conc >= 0 and redis.call('ZCARD', KEYS[4]) + 1 > conc then
    return {0, 'concurrent_requests', conc == 0 and -1 or tonumber(ARGV[9]), count, sum, reset_ms(now), ''}
  end
  redis.call('ZADD', KEYS[4], now + lease, holder)
  redis.call('PEXPIRE', KEYS[4], lease)
  redis.call('HSET', KEYS[5], 'h:' .. holder, 1)
  redis.call('HINCRBY', KEYS[5], 'n', 1)
  return {1, '', -1, count, sum, reset_ms(now), member}
end
local day = math.floor(now / DAY)
local day_key = KEYS[6] .. day
local function free_at(need, by_tokens)
  local freed, start = 0, 0
  while true do
    local batch = redis.call('ZRANGE', KEYS[1], start, start + 199, 'WITHSCORES')
    if #batch == 0 then return WINDOW end
    local members = {}
    for i = 1, #batch, 2 do members[#members + 1] = batch[i] end
    local amounts = by_tokens and redis.call('HMGET', KEYS[2], unpack(members)) or nil
    for i = 1, #members do
      freed = freed + (by_tokens and (tonumber(amounts[i]) or 0) or 1)
      if freed >= need then return math.max(0, tonumber(batch[2 * i]) + WINDOW - now) end
    end
    start = start + 200
  end
end
local limit, retry = '', -2  -- retry -1: never fits
local function refuse(name, ms)
  if retry ~= -1 and (ms == -1 or ms > retry) then limit, retry = name, ms end
end
if rpm >= 0 and count + 1 > rpm then
  refuse('requests_per_minute', rpm == 0 and -1 or free_at(count + 1 - rpm, false))
end
if tpm >= 0 and sum + tokens > tpm then
  refuse('tokens_per_minute', tokens > tpm and -1 or free_at(sum + tokens - tpm, true))
end
if conc >= 0 and redis.call('ZCARD', KEYS[4]) + 1 > conc then
  refuse('concurrent_requests', conc == 0 and -1 or tonumber(ARGV[9]))
end
if tpd >= 0 then
  local used = tonumber(redis.call('GET', day_key) or '0')
  if used + tokens > tpd then refuse('tokens_per_day', tokens > tpd and -1 or (day + 1) * DAY - now) end
end
if limit ~= '' then return {0, limit, retry, count, sum, reset_ms(now), ''} end
redis.call('ZADD', KEYS[1], now, holder)
redis.call('HSET', KEYS[2], holder, tokens)
redis.call('INCRBY', KEYS[3], tokens)
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], WINDOW + 1000) end
redis.call('ZADD', KEYS[4], now + lease, holder)
redis.call('PEXPIRE', KEYS[4], lease)
redis.call('INCRBY', day_key, tokens)
redis.call('PEXPIREAT', day_key, (day + 2) * DAY)
redis.call('HSET', KEYS[5], 'm', holder, 'r', tokens, 'd', day, 's', 0, 'n', 1, 'h:' .. holder, 1)
redis.call('PEXPIRE', KEYS[5], math.max(lease, 2 * DAY))  -- a long request still settles its day
return {1, '', -1, count + 1, sum + tokens, WINDOW, holder}
"""
)

SETTLE = (
    COMMON
    + """
-- ARGV: 1 now, 2 holder, 3 used tokens, 4 '1' when the holder's admit served no request (void)
local holder, used, void = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
if redis.call('HDEL', KEYS[5], 'h:' .. holder) == 0 then return 0 end
expire(now_ms())
local charge = redis.call('HMGET', KEYS[5], 'm', 'r', 'd', 's', 'n')
local member = charge[1]
local day_key = KEYS[6] .. charge[3]
if void and charge[4] == '0' and charge[5] == '1' then  -- the charge's only admit: taken back whole
  local amount = redis.call('HGET', KEYS[2], member)
  if amount then
    redis.call('ZREM', KEYS[1], member)
    redis.call('HDEL', KEYS[2], member)
    redis.call('DECRBY', KEYS[3], amount)
  end
  if redis.call('EXISTS', day_key) == 1 then redis.call('DECRBY', day_key, charge[2]) end
  redis.call('ZREM', KEYS[4], member)
  redis.call('DEL', KEYS[5])
  return 1
end
local delta = used
if charge[4] == '0' then delta = used - tonumber(charge[2]) end
if redis.call('HEXISTS', KEYS[2], member) == 1 then
  redis.call('HINCRBY', KEYS[2], member, delta)
  redis.call('INCRBY', KEYS[3], delta)
end
if redis.call('EXISTS', day_key) == 1 then redis.call('INCRBY', day_key, delta) end
redis.call('HSET', KEYS[5], 's', 1)
redis.call('ZREM', KEYS[4], holder)  -- each admit's own slot (the first admit's holder is the member)
if redis.call('HINCRBY', KEYS[5], 'n', -1) <= 0 then redis.call('DEL', KEYS[5]) end
return 1
"""
)
