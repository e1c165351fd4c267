"""The Lua scripts of RedisLimiter: the same checks as windows.py, atomic in Redis, on the server's clock.

Keys of one tenant (all under one hash tag): KEYS[1] the window's sorted set (entry -> admit time ms: an admit's
entry is its holder and counts as a request, but a free join's, one of a charge's first FREE_JOINS joins, is
'j:' .. holder and counts only its tokens), KEYS[2] its hash (entry -> tokens), KEYS[3] the window's sums (t tokens,
r requests, c the time in ms up to which admissions have left the sums), KEYS[4] the concurrency slots (holder ->
lease end ms: one per admit, joins too), KEYS[5] the charge (fields m member, s served once, n open holders, j joins
admitted, and per open admit h:<holder> its reserved tokens, d:<holder> its UTC day), KEYS[6] the prefix of the
per-day counters (prefix .. UTC day number; derived keys of the same hash tag), KEYS[7] the window's sums per ms
(t<ms>, r<ms>) and per second (T<s>, R<s>), KEYS[8] the prefix of the marks (the holders whose admit or settle ran:
sets per MARK_BUCKET_MS of admit or settle time, prefix .. bucket number, each kept MARK_MS past its bucket's end;
one set per tenant and 10 s, not one key per admission: 120,000 keys at 1,000 admissions a second, at 149 bytes a
mark, against 100).

**Bounded work per call, exact counts.** Admissions leave the window's sums by time, not entry by entry: a call
subtracts what was admitted between the last call's cutoff and its own, by the entries' own amounts when they are
few (AGED_ENTRIES), else by the sums of their milliseconds (the partial seconds at either end) and of their seconds
between (about 4,000 hash fields read at most, however many admissions left), and takes at most CLEAN_PER_CALL aged-out entries out of the keys (each call adds one entry at
most, so they never pile up; the keys expire a second after their newest entry leaves in any case). Freeing every
entry of a 100,000-admission burst in one script held Redis, for every tenant, for tens of ms. Leases ended are taken
out CLEAN_PER_CALL at a time too; the slots held are counted by lease end (ZCOUNT), not by what is left in the set.
ARGV[1] is the time in ms, '' for the server's TIME (a test hook: tests pass their own clock).

Both scripts are idempotent per holder, so a call sent again after its connection broke (redis_calls.py) never
counts twice: an admit whose holder is marked already reserves nothing more (the first run did, or its settle
came first: a run that arrives after its own settle leaves no reservation that nobody would settle), and a settle
of a holder with nothing open changes nothing.
"""

from .model import CLEAN_PER_CALL, RETRY_SCAN

MARK_MS = 120_000
"""How long a holder's admit or settle is remembered at least: far longer than a call to Redis can wait in flight."""
MARK_BUCKET_MS = 10_000
"""The span of admit and settle times whose marks share one set (kept until MARK_MS after the span ends)."""
AGED_ENTRIES = 500
"""Up to this many admissions leaving the window in one call are subtracted by their own amounts; more, by the sums
of their milliseconds and seconds (about 4,000 hash fields, however many they are)."""

COMMON = (
    """
local WINDOW, DAY, MARK, BUCKET, RETRY_SCAN, CLEAN, AGED_ENTRIES = 60000, 86400000, """
    + f"{MARK_MS}, {MARK_BUCKET_MS}, {RETRY_SCAN}, {CLEAN_PER_CALL}, {AGED_ENTRIES}"
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
local function int(n) return string.format('%d', n) end
local function tally(ts, tokens, requests)  -- add to the window's sums: its total, its ms's and its second's
  for _, sum in ipairs({{'t', tokens}, {'r', requests}}) do
    if sum[2] ~= 0 then
      redis.call('HINCRBY', KEYS[3], sum[1], sum[2])
      for _, field in ipairs({sum[1] .. int(ts), string.upper(sum[1]) .. int(math.floor(ts / 1000))}) do
        if redis.call('HINCRBY', KEYS[7], field, sum[2]) == 0 then redis.call('HDEL', KEYS[7], field) end
      end
    end
  end
end
local function aged(from, to)  -- the tokens and requests admitted in (from, to] ms (less than WINDOW)
  local tokens, requests = 0, 0
  if redis.call('ZCOUNT', KEYS[1], '(' .. int(from), int(to)) <= AGED_ENTRIES then  -- few: their own amounts
    local entries = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. int(from), int(to))
    if #entries == 0 then return 0, 0 end
    for i, amount in ipairs(redis.call('HMGET', KEYS[2], unpack(entries))) do
      tokens = tokens + (tonumber(amount) or 0)
      if string.sub(entries[i], 1, 2) ~= 'j:' then requests = requests + 1 end
    end
    return tokens, requests
  end
  local fields = {}  -- many: the sums of their ms at either end, of their seconds between (4,000 fields at most)
  local function ms(a, b) for m = a + 1, b do fields[#fields + 1] = 't' .. int(m); fields[#fields + 1] = 'r' .. int(m) end end
  local first, last = math.floor((from + 1) / 1000), math.floor(to / 1000)
  if first == last then ms(from, to) else
    if from + 1 > first * 1000 then ms(from, (first + 1) * 1000 - 1) else first = first - 1 end
    if to < (last + 1) * 1000 - 1 then ms(last * 1000 - 1, to) else last = last + 1 end
    for s = first + 1, last - 1 do fields[#fields + 1] = 'T' .. int(s); fields[#fields + 1] = 'R' .. int(s) end
  end
  for start = 1, #fields, 1000 do  -- within Lua's stack
    local values = redis.call('HMGET', KEYS[7], unpack(fields, start, math.min(#fields, start + 999)))
    for i = 1, #values, 2 do
      tokens, requests = tokens + (tonumber(values[i]) or 0), requests + (tonumber(values[i + 1]) or 0)
    end
  end
  return tokens, requests
end
local function clean(done)  -- take up to CLEAN entries that left the window (and their sums) out of its keys
  local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', done, 'WITHSCORES', 'LIMIT', 0, CLEAN)
  if #old == 0 then return end
  local entries, sums = {}, {}
  for i = 1, #old, 2 do
    local ts = tonumber(old[i + 1])
    entries[#entries + 1] = old[i]
    sums[#sums + 1] = 't' .. int(ts)
    sums[#sums + 1] = 'r' .. int(ts)
  end
  redis.call('ZREM', KEYS[1], unpack(entries))
  redis.call('HDEL', KEYS[2], unpack(entries))
  redis.call('HDEL', KEYS[7], unpack(sums))
end
local function expire(now)  -- the window's sums lose what left it; returns the time up to which entries left it
  local cutoff = now - WINDOW
  local done = tonumber(redis.call('HGET', KEYS[3], 'c') or '')
  if not done then return cutoff end  -- an empty window
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #newest == 0 or tonumber(newest[2]) <= cutoff then  -- all of it left (UNLINK: a large key is freed aside)
    redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[7])
    return cutoff
  end
  if cutoff > done then  -- less than WINDOW: the newest entry came after the last cutoff
    local tokens, requests = aged(done, cutoff)
    if tokens ~= 0 then redis.call('HINCRBY', KEYS[3], 't', -tokens) end
    if requests ~= 0 then redis.call('HINCRBY', KEYS[3], 'r', -requests) end
    redis.call('HSET', KEYS[3], 'c', int(cutoff))
    local seconds = {}  -- the sums of the seconds that have now left whole
    for s = math.floor((done + 1) / 1000), math.floor((cutoff + 1) / 1000) - 1 do
      seconds[#seconds + 1] = 'T' .. int(s)
      seconds[#seconds + 1] = 'R' .. int(s)
    end
    if #seconds > 0 then redis.call('HDEL', KEYS[7], unpack(seconds)) end
    done = cutoff
  end
  clean(done)
  return done
end
local function window_use()  -- the window's requests (entries less free joins) and tokens
  local sums = redis.call('HMGET', KEYS[3], 'r', 't')
  return {tonumber(sums[1]) or 0, tonumber(sums[2]) or 0}
end
local function reset_ms(now, done)
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #newest == 0 or tonumber(newest[2]) <= done then return 0 end
  return math.max(0, tonumber(newest[2]) + WINDOW - now)
end
local function free_slots(now)  -- the leases that ended, CLEAN at most; returns the slots still held
  local ended = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, CLEAN)
  if #ended > 0 then redis.call('ZREM', KEYS[4], unpack(ended)) end
  return redis.call('ZCOUNT', KEYS[4], '(' .. int(now), '+inf')
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
local done = expire(now)
local held = free_slots(now)
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
    if start >= RETRY_SCAN then return reset_ms(now, done) end
    local batch = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. int(done), '+inf', 'WITHSCORES', 'LIMIT', start, 200)
    if #batch == 0 then return reset_ms(now, done) end
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
if conc >= 0 and held + 1 > conc then
  refuse('concurrent_requests', conc == 0 and -1 or tonumber(ARGV[9]))
end
if tpd >= 0 then
  local used = tonumber(redis.call('GET', day_key) or '0')
  if used + tokens > tpd then refuse('tokens_per_day', tokens > tpd and -1 or (day + 1) * DAY - now) end
end
if limit ~= '' then
  redis.call('SREM', KEYS[8] .. marked_in, holder)  -- refused: nothing reserved, a rerun decides afresh
  return {0, limit, retry, count, sum, reset_ms(now, done), 0}
end
local entry = holder
if free_join then  -- the same request: not counted
  entry = 'j:' .. holder
else
  count = count + 1
end
if member then
  redis.call('HINCRBY', KEYS[5], 'j', 1)
else
  redis.call('HSET', KEYS[5], 'm', holder, 's', 0, 'j', 0)
end
local at = math.max(now, done + 1)  -- in the window even when the clock went back
redis.call('ZADD', KEYS[1], at, entry)
redis.call('HSET', KEYS[2], entry, tokens)
redis.call('HSET', KEYS[3], 'c', int(done))
tally(at, tokens, free_join and 0 or 1)
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
local done = expire(now)
mark(holder, now)  -- an admit of this holder still in flight reserves nothing
local function settled_use()
  local use = window_use()
  use[3] = reset_ms(now, done)
  return use
end
local own = redis.call('HMGET', KEYS[5], 'h:' .. holder, 'd:' .. holder, 'm')
if not own[1] then return settled_use() end
redis.call('HDEL', KEYS[5], 'h:' .. holder, 'd:' .. holder)
local member = own[3]
local entry = redis.call('HEXISTS', KEYS[2], 'j:' .. holder) == 1 and 'j:' .. holder or holder
local function live(e)  -- an entry's admit time while it is in the window, else nil
  local at = tonumber(redis.call('ZSCORE', KEYS[1], e) or '')
  if at and at > done then return at end
end
local function drop(e)  -- take an admission's entry out of the window (nothing when it left already)
  local at = live(e)
  if not at then return end
  local request = string.sub(e, 1, 2) == 'j:' and 0 or 1
  tally(at, -tonumber(redis.call('HGET', KEYS[2], e) or '0'), -request)
  redis.call('ZREM', KEYS[1], e)
  redis.call('HDEL', KEYS[2], e)
end
local delta = used - tonumber(own[1])  -- this admit's reservation becomes its usage (a void's: nothing)
local at = live(entry)
if at then
  redis.call('HINCRBY', KEYS[2], entry, delta)
  tally(at, delta, 0)
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
