"""The Lua scripts of RedisLimiter: the same checks as windows.py, atomic in Redis, on the server's clock.

Keys of one tenant (all under one hash tag): KEYS[1] the window's sorted set (entry -> admit time ms: an admit's
entry is its holder and counts as a request, but a free join's, one of a charge's first FREE_JOINS joins, is
'j:' .. holder and counts only its tokens), KEYS[2] its hash (entry -> tokens), KEYS[3] the window's token sum,
KEYS[4] the concurrency slots (holder -> lease end ms: one per admit, joins too), KEYS[5] the charge (fields m
member, s served once, n open holders, j joins admitted, and per open admit h:<holder> its reserved tokens,
d:<holder> its UTC day), KEYS[6] the prefix of the per-day counters (prefix .. UTC day number; derived keys of the
same hash tag), KEYS[7] how many of the window's entries are free joins, KEYS[8] the prefix of the marks (the
holders whose admit or settle ran: sets per MARK_BUCKET_MS of admit or settle time, prefix .. bucket number, each kept
MARK_MS past its bucket's end; one set per tenant and 10 s, not one key per admission: 120,000 keys at 1,000
admissions a second, at 149 bytes a mark, against 100).
ARGV[1] is the time in ms, '' for the server's TIME (a test hook: tests pass their own clock).

Both scripts are idempotent per holder, so a call sent again after its connection broke (redis_calls.py) never
counts twice: an admit whose holder is marked already reserves nothing more (the first run did, or its settle
came first: a run that arrives after its own settle leaves no reservation that nobody would settle), and a settle
of a holder with nothing open changes nothing.
"""

from .model import RETRY_SCAN

MARK_MS = 120_000
"""How long a holder's admit or settle is remembered at least: far longer than a call to Redis can wait in flight."""
MARK_BUCKET_MS = 10_000
"""The span of admit and settle times whose marks share one set (kept until MARK_MS after the span ends)."""

COMMON = (
    """
local WINDOW, DAY, MARK, BUCKET, RETRY_SCAN = 60000, 86400000, """
    + f"{MARK_MS}, {MARK_BUCKET_MS}, {RETRY_SCAN}"
    + """
local function marked(holder, now)  -- whether this holder's admit or settle ran in the last MARK ms
  for bucket = math.floor((now - MARK) / BUCKET), math.floor(now / BUCKET) do
    if redis.call('SISMEMBER', KEYS[8] .. bucket, holder) == 1 then return true end
  end
  return false
end
local function mark(holder, now)  -- remember it for MARK ms at least; returns where, for unmark
  local bucket = math.floor(now / BUCKET)
  redis.call('SADD', KEYS[8] .. bucket, holder)
  redis.call('PEXPIRE', KEYS[8] .. bucket, (bucket + 1) * BUCKET + MARK - now)
  return bucket
end
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
    local joins = 0
    for _, entry in ipairs(old) do
      if string.sub(entry, 1, 2) == 'j:' then joins = joins + 1 end
    end
    redis.call('ZREM', KEYS[1], unpack(old))
    redis.call('HDEL', KEYS[2], unpack(old))
    redis.call('DECRBY', KEYS[3], freed)
    if joins > 0 then redis.call('DECRBY', KEYS[7], joins) end
  end
end
local function window_use()  -- the window's requests (entries less free joins) and tokens
  return {redis.call('ZCARD', KEYS[1]) - tonumber(redis.call('GET', KEYS[7]) or '0'),
    tonumber(redis.call('GET', KEYS[3]) or '0')}
end
local function reset_ms(now)
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #newest == 0 then return 0 end
  return math.max(0, tonumber(newest[2]) + WINDOW - now)
end
"""
)

ADMIT = (
    COMMON
    + """
-- ARGV: 1 now, 2 tokens, 3 rpm, 4 tpm, 5 concurrency, 6 tokens per day (-1: unlimited), 7 holder, 8 lease ms,
-- 9 the retry ms of a concurrency refusal, 10 FREE_JOINS, 11 least (-1: none; else reserve what the token limits
-- leave, up to tokens, and no fewer than least: windows.fitted)
local now = now_ms()
local tokens, rpm, tpm, conc, tpd = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
  tonumber(ARGV[6])
local holder, lease = ARGV[7], tonumber(ARGV[8])
expire(now)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local count, sum = unpack(window_use())
if marked(holder, now) then  -- a rerun: what the first run reserved, when it is still open
  return {1, '', -1, count, sum, WINDOW, tonumber(redis.call('HGET', KEYS[5], 'h:' .. holder) or tokens)}
end
local marked_in = mark(holder, now)
local member = redis.call('HGET', KEYS[5], 'm')  -- set: a join (its tokens and slot its own)
local free_join = member and tonumber(redis.call('HGET', KEYS[5], 'j') or '0') < tonumber(ARGV[10])
local day = math.floor(now / DAY)
local day_key = KEYS[6] .. day
local least = tonumber(ARGV[11])
if least >= 0 and least < tokens then
  local room = tokens
  if tpm >= 0 then room = math.min(room, tpm - sum) end
  if tpd >= 0 then room = math.min(room, tpd - tonumber(redis.call('GET', day_key) or '0')) end
  tokens = math.max(least, room)
end
local function free_at(need, by_tokens)
  local freed, start = 0, 0
  while true do  -- past the oldest RETRY_SCAN entries: when the whole window has left (an upper bound)
    if start >= RETRY_SCAN then return reset_ms(now) end
    local batch = redis.call('ZRANGE', KEYS[1], start, start + 199, 'WITHSCORES')
    if #batch == 0 then return reset_ms(now) end
    local members = {}
    for i = 1, #batch, 2 do members[#members + 1] = batch[i] end
    local amounts = by_tokens and redis.call('HMGET', KEYS[2], unpack(members)) or nil
    for i = 1, #members do
      local request = string.sub(members[i], 1, 2) ~= 'j:' and 1 or 0
      freed = freed + (by_tokens and (tonumber(amounts[i]) or 0) or request)
      if freed >= need then return math.max(0, tonumber(batch[2 * i]) + WINDOW - now) end
    end
    start = start + 200
  end
end
local limit, retry = '', -2  -- retry -1: never fits
local function refuse(name, ms)
  if retry ~= -1 and (ms == -1 or ms > retry) then limit, retry = name, ms end
end
if rpm >= 0 and not free_join and count + 1 > rpm then
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
if limit ~= '' then
  redis.call('SREM', KEYS[8] .. marked_in, holder)  -- refused: nothing reserved, a rerun decides afresh
  return {0, limit, retry, count, sum, reset_ms(now), 0}
end
local entry = holder
if free_join then  -- the same request: not counted
  entry = 'j:' .. holder
  redis.call('INCRBY', KEYS[7], 1)
else
  count = count + 1
end
if member then
  redis.call('HINCRBY', KEYS[5], 'j', 1)
else
  redis.call('HSET', KEYS[5], 'm', holder, 's', 0, 'j', 0)
end
redis.call('ZADD', KEYS[1], now, entry)
redis.call('HSET', KEYS[2], entry, tokens)
redis.call('INCRBY', KEYS[3], tokens)
for _, i in ipairs({1, 2, 3, 7}) do redis.call('PEXPIRE', KEYS[i], WINDOW + 1000) end
redis.call('ZADD', KEYS[4], now + lease, holder)
redis.call('PEXPIRE', KEYS[4], lease)
redis.call('INCRBY', day_key, tokens)
redis.call('PEXPIREAT', day_key, (day + 2) * DAY)
redis.call('HSET', KEYS[5], 'h:' .. holder, tokens, 'd:' .. holder, day)
redis.call('HINCRBY', KEYS[5], 'n', 1)
redis.call('PEXPIRE', KEYS[5], math.max(lease, 2 * DAY))  -- a long request still settles its day
return {1, '', -1, count, sum + tokens, WINDOW, tokens}
"""
)

SETTLE = (
    COMMON
    + """
-- ARGV: 1 now, 2 holder, 3 used tokens, 4 '1' when the holder's admit served no request (void)
-- Returns the window's use after it: {requests, tokens, ms until it is empty}
local holder, used, void = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local now = now_ms()
expire(now)
mark(holder, now)  -- an admit of this holder still in flight reserves nothing
local function settled_use()
  local use = window_use()
  use[3] = reset_ms(now)
  return use
end
local own = redis.call('HMGET', KEYS[5], 'h:' .. holder, 'd:' .. holder, 'm')
if not own[1] then return settled_use() end
redis.call('HDEL', KEYS[5], 'h:' .. holder, 'd:' .. holder)
local member = own[3]
local entry = redis.call('HEXISTS', KEYS[2], 'j:' .. holder) == 1 and 'j:' .. holder or holder
local function drop(e)  -- take an admission's entry out of the window (nothing when it left already)
  local amount = redis.call('HGET', KEYS[2], e)
  if not amount then return end
  redis.call('ZREM', KEYS[1], e)
  redis.call('HDEL', KEYS[2], e)
  redis.call('DECRBY', KEYS[3], amount)
  if string.sub(e, 1, 2) == 'j:' then redis.call('DECRBY', KEYS[7], 1) end
end
local delta = used - tonumber(own[1])  -- this admit's reservation becomes its usage (a void's: nothing)
if redis.call('HEXISTS', KEYS[2], entry) == 1 then
  redis.call('HINCRBY', KEYS[2], entry, delta)
  redis.call('INCRBY', KEYS[3], delta)
end
if redis.call('EXISTS', KEYS[6] .. own[2]) == 1 then redis.call('INCRBY', KEYS[6] .. own[2], delta) end
redis.call('ZREM', KEYS[4], holder)  -- each admit's own slot
if void then
  if holder ~= member then drop(entry) end  -- a join that served nothing leaves no trace
else
  redis.call('HSET', KEYS[5], 's', 1)
end
if redis.call('HINCRBY', KEYS[5], 'n', -1) <= 0 then
  if redis.call('HGET', KEYS[5], 's') == '0' then drop(member) end  -- no admit served the request: taken back
  redis.call('DEL', KEYS[5])
end
return settled_use()
"""
)
