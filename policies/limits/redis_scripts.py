"""The Lua scripts of RedisLimiter: the same checks as windows.py, atomic in Redis, on the server's clock.

Keys of one tenant (all under one hash tag): KEYS[1] the window's sorted set (entry -> admit time ms: an admit's
entry is its holder and counts as a request, but a free join's, one of a charge's first FREE_JOINS joins, in a
window that counted the charge's first admit, is 'j:' .. holder and counts only its tokens), KEYS[2] its hash (entry -> tokens), KEYS[3] the window's sums (t tokens,
r requests, c the time in ms up to which admissions have left the sums), KEYS[4] the concurrency slots (holder ->
lease end ms: one per admit, joins too), KEYS[5] the charge (fields m member, s served once, n open holders, j joins
admitted, and per open admit h:<holder> its reserved tokens, d:<holder> its UTC day), KEYS[6] the prefix of the
per-day counters (prefix .. UTC day number; derived keys of the same hash tag), KEYS[7] the window's sums per ms
(t<ms>, r<ms>) and per second (T<s>, R<s>), KEYS[8] the prefix of the marks (the holders whose admit or settle ran:
sets per MARK_BUCKET_MS of admit or settle time, prefix .. bucket number, each kept MARK_MS past its bucket's end;
one set per tenant and 10 s, not one key per admission: 120,000 keys at 1,000 admissions a second, at 149 bytes a
mark, against 100), KEYS[9] the prefix of the tenant's scopes per model: a model with limits of its own has the
same window, slots and day keys as the tenant's (KEYS[1-4], 6, 7) under KEYS[9] .. model_key (derived keys of the
same hash tag), and an admit checks and reserves both in one call (the charge records each holder's model, 'p:',
and the member's, 'M', so its settle reaches the same windows), KEYS[10] the calling replica's marker (set while it
holds open admissions of the tenant: gone means Redis lost them, and RESTORE re-registers them; redis_limiter.py).

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
-- A scope: the keys of one window, its slots and its day counters: the tenant's own (KEYS), or those of its limits
-- for one model (derived from a prefix of the same hash tag)
local TENANT = {w = KEYS[1], wa = KEYS[2], ws = KEYS[3], slots = KEYS[4], d = KEYS[6], wb = KEYS[7]}
local function model_scope(prefix)
  if prefix == nil or prefix == '' then return nil end
  return {w = prefix .. ':w2', wa = prefix .. ':wa2', ws = prefix .. ':ws2', slots = prefix .. ':slots',
          d = prefix .. ':d:', wb = prefix .. ':wb2'}
end
local function tally(s, ts, tokens, requests)  -- add to the window's sums: its total, its ms's and its second's
  for _, sum in ipairs({{'t', tokens}, {'r', requests}}) do
    if sum[2] ~= 0 then
      redis.call('HINCRBY', s.ws, sum[1], sum[2])
      for _, field in ipairs({sum[1] .. int(ts), string.upper(sum[1]) .. int(math.floor(ts / 1000))}) do
        if redis.call('HINCRBY', s.wb, field, sum[2]) == 0 then redis.call('HDEL', s.wb, field) end
      end
    end
  end
end
local function aged(s, from, to)  -- the tokens and requests admitted in (from, to] ms (less than WINDOW)
  local tokens, requests = 0, 0
  if redis.call('ZCOUNT', s.w, '(' .. int(from), int(to)) <= AGED_ENTRIES then  -- few: their own amounts
    local entries = redis.call('ZRANGEBYSCORE', s.w, '(' .. int(from), int(to))
    if #entries == 0 then return 0, 0 end
    for i, amount in ipairs(redis.call('HMGET', s.wa, unpack(entries))) do
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
    for sec = first + 1, last - 1 do fields[#fields + 1] = 'T' .. int(sec); fields[#fields + 1] = 'R' .. int(sec) end
  end
  for start = 1, #fields, 1000 do  -- within Lua's stack
    local values = redis.call('HMGET', s.wb, unpack(fields, start, math.min(#fields, start + 999)))
    for i = 1, #values, 2 do
      tokens, requests = tokens + (tonumber(values[i]) or 0), requests + (tonumber(values[i + 1]) or 0)
    end
  end
  return tokens, requests
end
local function clean(s, done)  -- take up to CLEAN entries that left the window (and their sums) out of its keys
  local old = redis.call('ZRANGEBYSCORE', s.w, '-inf', done, 'WITHSCORES', 'LIMIT', 0, CLEAN)
  if #old == 0 then return end
  local entries, sums = {}, {}
  for i = 1, #old, 2 do
    local ts = tonumber(old[i + 1])
    entries[#entries + 1] = old[i]
    sums[#sums + 1] = 't' .. int(ts)
    sums[#sums + 1] = 'r' .. int(ts)
  end
  redis.call('ZREM', s.w, unpack(entries))
  redis.call('HDEL', s.wa, unpack(entries))
  redis.call('HDEL', s.wb, unpack(sums))
end
local function expire(s, now)  -- the window's sums lose what left it; returns the time up to which entries left it
  local cutoff = now - WINDOW
  local done = tonumber(redis.call('HGET', s.ws, 'c') or '')
  if not done then return cutoff end  -- an empty window
  local newest = redis.call('ZRANGE', s.w, -1, -1, 'WITHSCORES')
  if #newest == 0 or tonumber(newest[2]) <= cutoff then  -- all of it left (UNLINK: a large key is freed aside)
    redis.call('UNLINK', s.w, s.wa, s.ws, s.wb)
    return cutoff
  end
  if cutoff > done then  -- less than WINDOW: the newest entry came after the last cutoff
    local tokens, requests = aged(s, done, cutoff)
    if tokens ~= 0 then redis.call('HINCRBY', s.ws, 't', -tokens) end
    if requests ~= 0 then redis.call('HINCRBY', s.ws, 'r', -requests) end
    redis.call('HSET', s.ws, 'c', int(cutoff))
    local seconds = {}  -- the sums of the seconds that have now left whole
    for sec = math.floor((done + 1) / 1000), math.floor((cutoff + 1) / 1000) - 1 do
      seconds[#seconds + 1] = 'T' .. int(sec)
      seconds[#seconds + 1] = 'R' .. int(sec)
    end
    if #seconds > 0 then redis.call('HDEL', s.wb, unpack(seconds)) end
    done = cutoff
  end
  clean(s, done)
  return done
end
local function window_use(s)  -- the window's requests (entries less free joins) and tokens
  local sums = redis.call('HMGET', s.ws, 'r', 't')
  return {tonumber(sums[1]) or 0, tonumber(sums[2]) or 0}
end
local function reset_ms(s, now, done)
  local newest = redis.call('ZRANGE', s.w, -1, -1, 'WITHSCORES')
  if #newest == 0 or tonumber(newest[2]) <= done then return 0 end
  return math.max(0, tonumber(newest[2]) + WINDOW - now)
end
local function free_slots(s, now)  -- the leases that ended, CLEAN at most; returns the slots still held
  local ended = redis.call('ZRANGEBYSCORE', s.slots, '-inf', now, 'LIMIT', 0, CLEAN)
  if #ended > 0 then redis.call('ZREM', s.slots, unpack(ended)) end
  return redis.call('ZCOUNT', s.slots, '(' .. int(now), '+inf')
end
local function live(s, done, e)  -- an entry's admit time while it is in the window, else nil
  local at = tonumber(redis.call('ZSCORE', s.w, e) or '')
  if at and at > done then return at end
end
local function drop(s, done, e)  -- take an admission's entry out of the window (nothing when it left already)
  local at = live(s, done, e)
  if not at then return end
  local request = string.sub(e, 1, 2) == 'j:' and 0 or 1
  tally(s, at, -tonumber(redis.call('HGET', s.wa, e) or '0'), -request)
  redis.call('ZREM', s.w, e)
  redis.call('HDEL', s.wa, e)
end
"""
)

ADMIT = (
    COMMON
    + """
-- ARGV: 1 now, 2 tokens, 3 rpm, 4 tpm, 5 concurrency, 6 tokens per day (-1: unlimited), 7 holder, 8 lease ms,
-- 9 the retry ms of a concurrency refusal, 10 FREE_JOINS, 11 least (-1: none; else reserve what the token limits
-- leave, up to tokens, and no fewer than least: windows.fitted), 12-15 the model's rpm, tpm, concurrency and tokens
-- per day, 16 the model's key ('' when it has no limits of its own: its scope is KEYS[9] .. ARGV[16]), 17 '1' when
-- this replica holds open admissions of the tenant (then its marker KEYS[10] must exist, else Redis lost them: the
-- answer is 'lost', nothing done), 18 the marker's life in ms (set on every admission)
local now = now_ms()
local tokens = tonumber(ARGV[2])
local holder, lease, model = ARGV[7], tonumber(ARGV[8]), ARGV[16]
local scopes = {{s = TENANT, name = 'tenant', first = 3}}
if model ~= '' then scopes[2] = {s = model_scope(KEYS[9] .. model), name = 'model', first = 12} end
local day = math.floor(now / DAY)
for _, sc in ipairs(scopes) do
  sc.rpm, sc.tpm, sc.conc, sc.tpd = tonumber(ARGV[sc.first]), tonumber(ARGV[sc.first + 1]),
    tonumber(ARGV[sc.first + 2]), tonumber(ARGV[sc.first + 3])
  sc.done = expire(sc.s, now)
  sc.held = free_slots(sc.s, now)
  sc.count, sc.sum = unpack(window_use(sc.s))
  sc.day_key = sc.s.d .. day
  sc.day_used = tonumber(redis.call('GET', sc.day_key) or '0')
end
local function answer(allowed, limit, retry, reserved, scope, added)  -- added: the tokens this admission counted
  local out = {allowed, limit, retry, 0, 0, 0, reserved, scope, -1, -1, -1}
  for i, sc in ipairs(scopes) do
    local reset = added and WINDOW or reset_ms(sc.s, now, sc.done)
    local at = i == 1 and 4 or 9
    out[at], out[at + 1], out[at + 2] = sc.count, sc.sum + (added or 0), reset
  end
  return out
end
if ARGV[17] == '1' and redis.call('EXISTS', KEYS[10]) == 0 then return 'lost' end  -- restore this replica's first
if marked(holder, now) then  -- a rerun: what the first run reserved, when it is still open
  return answer(1, '', -1, tonumber(redis.call('HGET', KEYS[5], 'h:' .. holder) or tokens), '', 0)
end
local marked_in = mark(holder, now)
local member = redis.call('HGET', KEYS[5], 'm')  -- set: a join (its tokens and slot its own)
local free_join = member and tonumber(redis.call('HGET', KEYS[5], 'j') or '0') < tonumber(ARGV[10])
local member_model = member and redis.call('HGET', KEYS[5], 'M') or ''
for _, sc in ipairs(scopes) do  -- a free join is free where the first admit counted: not another model's window
  sc.free = free_join and (sc.name == 'tenant' or member_model == model)
end
local least = tonumber(ARGV[11])
if least >= 0 and least < tokens then
  local room = tokens
  for _, sc in ipairs(scopes) do
    if sc.tpm >= 0 then room = math.min(room, sc.tpm - sc.sum) end
    if sc.tpd >= 0 then room = math.min(room, sc.tpd - sc.day_used) end
  end
  tokens = math.max(least, room)
end
local function free_by_sums(sc, need, by_tokens)  -- free_at's time, read by the sums of the window's seconds, then of
  -- the second where `need` has left (and the part of the first second in the window) by its entries when they are
  -- few (AGED_ENTRIES), else by the sums of its ms (about 2,000 fields at most, however many entries)
  local s, ms_field, second_field = sc.s, by_tokens and 't' or 'r', by_tokens and 'T' or 'R'
  local newest = redis.call('ZRANGE', s.w, -1, -1, 'WITHSCORES')
  if #newest == 0 then return reset_ms(s, now, sc.done) end
  local last, freed = tonumber(newest[2]), 0
  local function by_ms(from, to)  -- the first ms of [from, to] by which `need` has left, or nil
    if from > to then return nil end
    if redis.call('ZCOUNT', s.w, int(from), int(to)) <= AGED_ENTRIES then  -- few: their own amounts
      local entries = redis.call('ZRANGEBYSCORE', s.w, int(from), int(to), 'WITHSCORES')
      if #entries == 0 then return nil end
      local members = {}
      for i = 1, #entries, 2 do members[#members + 1] = entries[i] end
      local amounts = by_tokens and redis.call('HMGET', s.wa, unpack(members)) or nil
      for i = 1, #members do
        local request = string.sub(members[i], 1, 2) ~= 'j:' and 1 or 0
        freed = freed + (by_tokens and (tonumber(amounts[i]) or 0) or request)
        if freed >= need then return tonumber(entries[2 * i]) end
      end
      return nil
    end
    local fields = {}
    for m = from, to do fields[#fields + 1] = ms_field .. int(m) end
    local values = redis.call('HMGET', s.wb, unpack(fields))
    for i = 1, #values do
      freed = freed + (tonumber(values[i]) or 0)
      if freed >= need then return from + i - 1 end
    end
  end
  local first = sc.done + 1
  local second = math.floor(first / 1000)
  if first % 1000 ~= 0 then  -- the part of the first second still in the window
    local at = by_ms(first, math.min(last, second * 1000 + 999))
    if at then return math.max(0, at + WINDOW - now) end
    second = second + 1
  end
  local fields = {}
  for sec = second, math.floor(last / 1000) do fields[#fields + 1] = second_field .. int(sec) end
  if #fields == 0 then return reset_ms(s, now, sc.done) end
  local values = redis.call('HMGET', s.wb, unpack(fields))
  for i = 1, #values do
    local weight = tonumber(values[i]) or 0
    if freed + weight >= need then
      local sec = second + i - 1
      local at = by_ms(sec * 1000, math.min(last, sec * 1000 + 999))
      if at then return math.max(0, at + WINDOW - now) end
      break
    end
    freed = freed + weight
  end
  return reset_ms(s, now, sc.done)
end
local function free_at(sc, need, by_tokens)
  local freed, start = 0, 0
  while true do  -- past the oldest RETRY_SCAN entries: read by the sums
    if start >= RETRY_SCAN then return free_by_sums(sc, need, by_tokens) end
    local batch = redis.call('ZRANGEBYSCORE', sc.s.w, '(' .. int(sc.done), '+inf', 'WITHSCORES', 'LIMIT', start, 200)
    if #batch == 0 then return reset_ms(sc.s, now, sc.done) end
    local members = {}
    for i = 1, #batch, 2 do members[#members + 1] = batch[i] end
    local amounts = by_tokens and redis.call('HMGET', sc.s.wa, unpack(members)) or nil
    for i = 1, #members do
      local request = string.sub(members[i], 1, 2) ~= 'j:' and 1 or 0
      freed = freed + (by_tokens and (tonumber(amounts[i]) or 0) or request)
      if freed >= need then return math.max(0, tonumber(batch[2 * i]) + WINDOW - now) end
    end
    start = start + 200
  end
end
local limit, retry, scope = '', -2, ''  -- retry -1: never fits; the first refusal of the longest retry wins
local function refuse(sc, name, ms)
  if retry ~= -1 and (ms == -1 or ms > retry) then limit, retry, scope = name, ms, sc.name end
end
for _, sc in ipairs(scopes) do
  if sc.rpm >= 0 and not sc.free and sc.count + 1 > sc.rpm then
    refuse(sc, 'requests_per_minute', sc.rpm == 0 and -1 or free_at(sc, sc.count + 1 - sc.rpm, false))
  end
  if sc.tpm >= 0 and sc.sum + tokens > sc.tpm then
    refuse(sc, 'tokens_per_minute', tokens > sc.tpm and -1 or free_at(sc, sc.sum + tokens - sc.tpm, true))
  end
  if sc.conc >= 0 and sc.held + 1 > sc.conc then
    refuse(sc, 'concurrent_requests', sc.conc == 0 and -1 or tonumber(ARGV[9]))
  end
  if sc.tpd >= 0 and sc.day_used + tokens > sc.tpd then
    refuse(sc, 'tokens_per_day', tokens > sc.tpd and -1 or (day + 1) * DAY - now)
  end
end
if limit ~= '' then
  redis.call('SREM', KEYS[8] .. marked_in, holder)  -- refused: nothing reserved, a rerun decides afresh
  return answer(0, limit, retry, 0, scope, nil)
end
if member then
  redis.call('HINCRBY', KEYS[5], 'j', 1)
else
  redis.call('HSET', KEYS[5], 'm', holder, 's', 0, 'j', 0, 'M', model)
end
for _, sc in ipairs(scopes) do
  local s = sc.s
  local at = math.max(now, sc.done + 1)  -- in the window even when the clock went back
  local entry = sc.free and 'j:' .. holder or holder  -- a free join is the same request: not counted
  redis.call('ZADD', s.w, at, entry)
  redis.call('HSET', s.wa, entry, tokens)
  redis.call('HSET', s.ws, 'c', int(sc.done))
  tally(s, at, tokens, sc.free and 0 or 1)
  for _, key in ipairs({s.w, s.wa, s.ws, s.wb}) do redis.call('PEXPIRE', key, WINDOW + 1000) end
  redis.call('ZADD', s.slots, now + lease, holder)
  redis.call('PEXPIRE', s.slots, lease)
  redis.call('INCRBY', sc.day_key, tokens)
  redis.call('PEXPIREAT', sc.day_key, (day + 2) * DAY)
  if not sc.free then sc.count = sc.count + 1 end
end
redis.call('HSET', KEYS[5], 'h:' .. holder, tokens, 'd:' .. holder, day, 'p:' .. holder, model)
redis.call('HINCRBY', KEYS[5], 'n', 1)
redis.call('PEXPIRE', KEYS[5], math.max(lease, 2 * DAY))  -- a long request still settles its day
redis.call('SET', KEYS[10], 1, 'PX', ARGV[18])
return answer(1, '', -1, tokens, '', tokens)
"""
)

SETTLE = (
    COMMON
    + """
-- ARGV: 1 now, 2 holder, 3 used tokens, 4 '1' when the holder's admit served no request (void)
-- Returns the windows' use after it: {requests, tokens, ms until it is empty} of the tenant's, then of the model's
-- the holder was admitted under (-1s when it had no limits of its own, or the holder had settled); 'lost' (nothing
-- done) when ARGV[5] is '1' (the holder is one this replica restores) and its marker KEYS[10] is gone
if ARGV[5] == '1' and redis.call('EXISTS', KEYS[10]) == 0 then return 'lost' end
local holder, used, void = ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local now = now_ms()
local done = expire(TENANT, now)
mark(holder, now)  -- an admit of this holder still in flight reserves nothing
local own = redis.call('HMGET', KEYS[5], 'h:' .. holder, 'd:' .. holder, 'm', 'p:' .. holder, 'M')
local model = own[1] and own[4] or ''
local scopes = {{s = TENANT, done = done}}
if model ~= '' then
  local s = model_scope(KEYS[9] .. model)
  scopes[2] = {s = s, done = expire(s, now)}
end
local function settled_use()
  local out = {-1, -1, -1, -1, -1, -1}
  for i, sc in ipairs(scopes) do
    local use = window_use(sc.s)
    out[3 * i - 2], out[3 * i - 1], out[3 * i] = use[1], use[2], reset_ms(sc.s, now, sc.done)
  end
  return out
end
if not own[1] then return settled_use() end
redis.call('HDEL', KEYS[5], 'h:' .. holder, 'd:' .. holder, 'p:' .. holder)
local member = own[3]
local delta = used - tonumber(own[1])  -- this admit's reservation becomes its usage (a void's: nothing)
for _, sc in ipairs(scopes) do
  local s = sc.s
  local entry = redis.call('HEXISTS', s.wa, 'j:' .. holder) == 1 and 'j:' .. holder or holder  -- free here or not
  local at = live(s, sc.done, entry)
  if at then
    redis.call('HINCRBY', s.wa, entry, delta)
    tally(s, at, delta, 0)
  end
  if redis.call('EXISTS', s.d .. own[2]) == 1 then redis.call('INCRBY', s.d .. own[2], delta) end
  redis.call('ZREM', s.slots, holder)  -- each admit's own slot
  if void and holder ~= member then drop(s, sc.done, entry) end  -- a join that served nothing leaves no trace
end
if not void then redis.call('HSET', KEYS[5], 's', 1) end
if redis.call('HINCRBY', KEYS[5], 'n', -1) <= 0 then
  if redis.call('HGET', KEYS[5], 's') == '0' then  -- no admit served the request: taken back
    drop(TENANT, done, member)
    local theirs = own[5] or ''
    if theirs ~= '' then
      local s = theirs == model and scopes[2].s or model_scope(KEYS[9] .. theirs)
      drop(s, theirs == model and scopes[2].done or expire(s, now), member)
    end
  end
  redis.call('DEL', KEYS[5])
end
return settled_use()
"""
)

RESTORE = (
    COMMON
    + """
-- Re-registers one replica's open admissions of a tenant after Redis lost them (a restart without persistence):
-- their slots (for what is left of their leases), their charges (so their settlements apply) and their reserved
-- tokens in today's quota; then sets the replica's marker KEYS[10]. Per-minute windows are not restored (docs).
-- KEYS[10 + i]: the charge of the i-th admission. ARGV: 1 now, 2 the marker's life in ms, then per admission four:
-- holder, reserved tokens, model key ('' when none), the ms left of its lease. An admission its charge holds is left
-- as it is (restored already), and so is one marked (settled since it was restored: a restore sent while its settle
-- was in flight), so a restore sent twice counts once and never brings back a settled slot.
local now = now_ms()
local day = math.floor(now / DAY)
for i = 0, (#ARGV - 2) / 4 - 1 do
  local holder, tokens, model, lease = ARGV[3 + 4 * i], tonumber(ARGV[4 + 4 * i]), ARGV[5 + 4 * i], tonumber(ARGV[6 + 4 * i])
  local charge = KEYS[11 + i]
  if redis.call('HEXISTS', charge, 'h:' .. holder) == 0 and not marked(holder, now) then
    local scopes = {TENANT}
    if model ~= '' then scopes[2] = model_scope(KEYS[9] .. model) end
    for _, s in ipairs(scopes) do
      redis.call('ZADD', s.slots, now + lease, holder)
      if redis.call('PTTL', s.slots) < lease then redis.call('PEXPIRE', s.slots, lease) end
      redis.call('INCRBY', s.d .. day, tokens)
      redis.call('PEXPIREAT', s.d .. day, (day + 2) * DAY)
    end
    if redis.call('HSETNX', charge, 'm', holder) == 1 then redis.call('HSET', charge, 's', 0, 'j', 0, 'M', model) end
    redis.call('HSET', charge, 'h:' .. holder, tokens, 'd:' .. holder, day, 'p:' .. holder, model)
    redis.call('HINCRBY', charge, 'n', 1)
    redis.call('PEXPIRE', charge, math.max(lease, 2 * DAY))
  end
end
redis.call('SET', KEYS[10], 1, 'PX', ARGV[2])
return 1
"""
)
