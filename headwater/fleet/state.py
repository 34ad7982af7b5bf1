"""The fleet's state machine: every document of a run moves through its steps by atomic transitions.

    queued ──admit──▶ fetch ──▶ parse ──▶ embed (dense ∥ sparse) ──▶ write ──▶ indexed
                        │         │                                    │
                        └─────────┴──── unchanged | skipped | failed | deleted (terminal)

Each pending step of a document is a *lease* (headwater:leases, member "run<US>step<US>uri",
score = deadline). A task may work on a step only after acquiring its lease (one holder at a
time; a delivery counter catches poison pills), keeps renewing it while it runs, and ends it with
one commit that removes the lease and, in the same Lua script, either creates the next step's
lease or makes the document terminal. A terminal transition also admits the next queued
document into the run's window and, when it was the run's last open document, creates the
run's `finish` lease. So every crash leaves a lease behind: the sweeper re-drives a lease whose
deadline passed, and the late original message finds its lease gone (done) or held (busy).

The batched steps (dense, sparse, write) are also queued per collection (headwater:col:{c}:due:{step})
in the same scripts that create their leases, so one task takes many documents at once, each still
by its own lease: a batch task that dies leaves leases that expire and put its documents back.

A run is complete when its listing is stored and no document is queued or active: that is read
from the sets of states, never from counters. The counters on the run record are incremented
inside the same scripts as the transitions they count, once per transition.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from headwater.fleet import keys

LIST, FETCH, PARSE, DENSE, SPARSE, WRITE, FINISH = "list", "fetch", "parse", "dense", "sparse", "write", "finish"
DOCUMENT_STEPS = (FETCH, PARSE, DENSE, SPARSE, WRITE)
# The document states (run:{id}:docs) from which a document may still join a batched step's queue.
UPSTREAM_STATES = {DENSE: ("fetch", "parse"), SPARSE: ("fetch", "parse"), WRITE: ("fetch", "parse", "embed")}
DRAIN_SCAN_LIMIT = 256  # active documents a schedule looks through to see whether a run has more coming
BATCHED_STEPS = (DENSE, SPARSE, WRITE)
RUN_STEPS = (LIST, FINISH)

_PRELUDE = r"""
local P = ARGV[1]
local SEP = '\31'
local TERMINAL = {indexed=true, unchanged=true, skipped=true, failed=true, deleted=true}
local DOC_STEPS = {'fetch', 'parse', 'dense', 'sparse', 'write'}
local BATCHED = {dense=true, sparse=true, write=true}  -- taken from a per-collection queue, many documents at once
local function rk(rid) return P .. 'run:' .. rid end
local function member(rid, step, uri) return rid .. SEP .. step .. SEP .. uri end
local function unfinished(rid)
  local s = redis.call('HGET', rk(rid), 'status')
  return s == 'pending' or s == 'running'
end
local function drop_lease(m)
  redis.call('ZREM', P .. 'leases', m)
  for _, h in ipairs({'holders', 'deliveries', 'attempts', 'redrives', 'weights'}) do
    redis.call('HDEL', P .. 'lease:' .. h, m)
  end
end
local function add_lease(m, deadline)
  redis.call('ZADD', P .. 'leases', deadline, m)
  redis.call('HDEL', P .. 'lease:holders', m)
end
local function due_key(rid, step)
  return P .. 'col:' .. (redis.call('HGET', rk(rid), 'collection') or '') .. ':due:' .. step
end
local function weight_of(m) return tonumber(redis.call('HGET', P .. 'lease:weights', m) or '1') end
-- A batched step's document joins its collection's queue for that step, due at `at` (once: a
-- re-drive of a document still queued keeps its place); the queue's weight says how full a batch is.
local function enqueue(rid, step, uri, at)
  local key = due_key(rid, step)
  if redis.call('ZADD', key, 'NX', at, rid .. SEP .. uri) == 1 then
    redis.call('INCRBY', key .. ':weight', weight_of(member(rid, step, uri)))
  end
end
local function dequeue(key, entry, m)
  if redis.call('ZREM', key, entry) == 1 then redis.call('DECRBY', key .. ':weight', weight_of(m)) end
end
-- Move queued documents into the pipeline while the run's window has room; returns their uris.
local function admit(rid, now, queued)
  local out = {}
  if not unfinished(rid) then return out end
  local window = tonumber(redis.call('HGET', rk(rid), 'window') or '32')
  while redis.call('SCARD', rk(rid) .. ':active') < window do
    local uri = redis.call('LPOP', rk(rid) .. ':todo')
    if not uri then break end
    redis.call('SADD', rk(rid) .. ':active', uri)
    redis.call('HSET', rk(rid) .. ':docs', uri, 'fetch')
    add_lease(member(rid, 'fetch', uri), now + queued)
    table.insert(out, uri)
  end
  return out
end
-- When the listing is stored and nothing is queued or active, the run's finish step is due.
local function maybe_last(rid, now, queued)
  if not unfinished(rid) or redis.call('HGET', rk(rid), 'listed') ~= '1' then return 0 end
  if redis.call('SCARD', rk(rid) .. ':active') > 0 or redis.call('LLEN', rk(rid) .. ':todo') > 0 then return 0 end
  local fm = member(rid, 'finish', '')
  if redis.call('HGET', rk(rid), 'finish_due') == '1' then return 0 end
  redis.call('HSET', rk(rid), 'finish_due', '1')
  add_lease(fm, now + queued)
  return 1
end
local function terminal(rid, uri, state, reason, now, queued)
  local cur = redis.call('HGET', rk(rid) .. ':docs', uri)
  if cur and TERMINAL[cur] then return {}, 0 end
  redis.call('HSET', rk(rid) .. ':docs', uri, state)
  redis.call('SREM', rk(rid) .. ':active', uri)
  redis.call('HINCRBY', rk(rid), state, 1)
  if reason ~= '' then
    redis.call('HSETNX', rk(rid) .. (state == 'failed' and ':errors' or ':notes'), uri, reason)
  end
  for _, step in ipairs(DOC_STEPS) do
    if BATCHED[step] then dequeue(due_key(rid, step), rid .. SEP .. uri, member(rid, step, uri)) end
    drop_lease(member(rid, step, uri))
  end
  local claim = redis.call('HGET', rk(rid) .. ':claims', uri)
  if claim and redis.call('GET', claim) == rid then redis.call('DEL', claim) end
  return admit(rid, now, queued), maybe_last(rid, now, queued)
end
local function close_run(rid, status, now)
  if not unfinished(rid) then return 0 end
  redis.call('HSET', rk(rid), 'status', status, 'finished_at', now)
  drop_lease(member(rid, 'list', ''))
  drop_lease(member(rid, 'finish', ''))
  return 1
end
-- Take a lease: one live holder at a time; the n-th taking past the limit is a poison pill.
local function take(m, rid, step, uri, token, now, lease, max_deliveries, queued)
  if not unfinished(rid) then return {'finished'} end
  local score = redis.call('ZSCORE', P .. 'leases', m)
  if not score then return {'done'} end
  if redis.call('HGET', P .. 'lease:holders', m) and tonumber(score) > now then return {'busy'} end
  local n = redis.call('HINCRBY', P .. 'lease:deliveries', m, 1)
  if n > max_deliveries then
    local reason = 'poison pill: the worker running its ' .. step .. ' step was lost ' .. (n - 1) ..
                   ' times; fix or exclude the document, then `headwater retry`'
    if uri == '' then
      redis.call('HSETNX', rk(rid) .. ':errors', '(source)', reason)
      redis.call('HINCRBY', rk(rid), 'failed', 1)
      close_run(rid, 'failed', now)
      return {'poisoned', {}, 0}
    end
    local admitted, last = terminal(rid, uri, 'failed', reason, now, queued)
    return {'poisoned', admitted, last}
  end
  redis.call('HSET', P .. 'lease:holders', m, token)
  redis.call('ZADD', P .. 'leases', now + lease, m)
  return {'ok', n}
end
"""

# ARGV: P, member, run, step, uri, token, now, lease, max_deliveries, queued
_ACQUIRE = _PRELUDE + """
return take(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8]),
            tonumber(ARGV[9]), tonumber(ARGV[10]))
"""

# ARGV: P, token, deadline, members...
_RENEW = _PRELUDE + """
local renewed = 0
for i = 4, #ARGV do
  if redis.call('HGET', P .. 'lease:holders', ARGV[i]) == ARGV[2] then
    redis.call('ZADD', P .. 'leases', 'XX', tonumber(ARGV[3]), ARGV[i])
    renewed = renewed + 1
  end
end
return renewed
"""

# ARGV: P, member, token, run, uri, now, queued, next_state, next_steps (comma list), reason, weight, siblings...
# A step's commit: the lease goes, and the document moves on (or waits for its sibling step). A
# batched next step joins its queue in the same script, with its weight (texts to embed).
_COMMIT = _PRELUDE + """
local m, token, rid, uri = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now, queued, nxt, weight = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8], ARGV[11]
if redis.call('HGET', P .. 'lease:holders', m) ~= token then return {'lost'} end
drop_lease(m)
if not unfinished(rid) then return {'finished'} end
if TERMINAL[nxt] then
  local admitted, last = terminal(rid, uri, nxt, ARGV[10], now, queued)
  return {'terminal', admitted, last}
end
for i = 12, #ARGV do
  if redis.call('ZSCORE', P .. 'leases', ARGV[i]) then return {'wait'} end
end
redis.call('HSET', rk(rid) .. ':docs', uri, nxt)
for step in string.gmatch(ARGV[9], '[^,]+') do
  add_lease(member(rid, step, uri), now + queued)
  if BATCHED[step] then
    redis.call('HSET', P .. 'lease:weights', member(rid, step, uri), weight)
    enqueue(rid, step, uri, now)
  end
end
return {'next'}
"""

# ARGV: P, member, token, run, uri, now, queued, retry_deadline, max_retries, reason, step
# A step failed in a way worth retrying: count the attempt; past the budget the document fails.
_FAIL_ATTEMPT = _PRELUDE + """
local m, token, rid, uri = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now, queued = tonumber(ARGV[6]), tonumber(ARGV[7])
if redis.call('HGET', P .. 'lease:holders', m) ~= token then return {'lost'} end
redis.call('HDEL', P .. 'lease:holders', m)
redis.call('HINCRBY', P .. 'lease:deliveries', m, -1)  -- an orderly failure is not a lost worker
local attempts = redis.call('HINCRBY', P .. 'lease:attempts', m, 1)
if attempts > tonumber(ARGV[9]) then
  if uri == '' then
    redis.call('HSETNX', rk(rid) .. ':errors', '(source)', ARGV[10])
    redis.call('HINCRBY', rk(rid), 'failed', 1)
    close_run(rid, 'failed', now)
    return {'gave_up', {}, 0}
  end
  local admitted, last = terminal(rid, uri, 'failed', ARGV[10], now, queued)
  return {'gave_up', admitted, last}
end
redis.call('ZADD', P .. 'leases', tonumber(ARGV[8]), m)
local step = ARGV[11]
if BATCHED[step] then enqueue(rid, step, uri, tonumber(ARGV[8]) - queued) end  -- back in its queue, due after the backoff
return {'retry', attempts}
"""

# ARGV: P, claim key, run, uri, ttl — one run at a time works on a document, from its fetch to its end,
# so a run never decides from what the collection held before another run's write of the same document.
_CLAIM_DOCUMENT = _PRELUDE + """
local key, rid, uri = ARGV[2], ARGV[3], ARGV[4]
local holder = redis.call('GET', key)
if holder and holder ~= rid and unfinished(holder) then
  local st = redis.call('HGET', rk(holder) .. ':docs', uri)
  if st and not TERMINAL[st] then return 0 end
end
redis.call('SET', key, rid, 'EX', tonumber(ARGV[5]))
redis.call('HSET', rk(rid) .. ':claims', uri, key)
return 1
"""

# ARGV: P, member, token, deadline — hand a held step back unchanged, to be sent again later.
_DEFER = _PRELUDE + """
if redis.call('HGET', P .. 'lease:holders', ARGV[2]) ~= ARGV[3] then return 0 end
redis.call('HDEL', P .. 'lease:holders', ARGV[2])
redis.call('HINCRBY', P .. 'lease:deliveries', ARGV[2], -1)
redis.call('ZADD', P .. 'leases', tonumber(ARGV[4]), ARGV[2])
return 1
"""

# ARGV: P, member, token, run, now, queued
# The listing is stored: the run's documents may enter the pipeline.
_LISTED = _PRELUDE + """
local m, token, rid = ARGV[2], ARGV[3], ARGV[4]
local now, queued = tonumber(ARGV[5]), tonumber(ARGV[6])
if redis.call('HGET', P .. 'lease:holders', m) ~= token then return {'lost'} end
drop_lease(m)
if not unfinished(rid) then return {'finished'} end
redis.call('HSET', rk(rid), 'listed', '1')
return {'next', admit(rid, now, queued), maybe_last(rid, now, queued)}
"""

# ARGV: P, run, now, queued — a run created with its documents already known (live changes, retries).
_START_KNOWN = _PRELUDE + """
local rid, now, queued = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('HSET', rk(rid), 'listed', '1')
if redis.call('HGET', rk(rid), 'status') == 'pending' then
  redis.call('HSET', rk(rid), 'status', 'running', 'started_at', now)
end
return {'next', admit(rid, now, queued), maybe_last(rid, now, queued)}
"""

# ARGV: P, member, token, run, parent uri, now, queued, max_pages, then (uri, change json, depth) triples.
# A crawled document's fetch adds the links discovery admitted to the run, while its own lease is held
# (so the run cannot finish before them): headwater.pipeline.discovery.Frontier.take made atomic across
# workers. Each uri once per run, at most max_pages documents; a uri refused for max_pages marks the
# run truncated (what it never reached is then not deleted). Then the window admits what it has room for.
_DISCOVER = _PRELUDE + """
local m, token, rid, parent = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now, queued, max_pages = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
if redis.call('HGET', P .. 'lease:holders', m) ~= token then return {'lost'} end
if not unfinished(rid) then return {'finished'} end
local added = 0
for i = 9, #ARGV, 3 do
  local uri = ARGV[i]
  if redis.call('HEXISTS', rk(rid) .. ':docs', uri) == 0 then
    if redis.call('HLEN', rk(rid) .. ':docs') >= max_pages then
      redis.call('HSET', rk(rid), 'truncated', '1')
      break
    end
    redis.call('HSET', rk(rid) .. ':docs', uri, 'queued')
    redis.call('HSET', rk(rid) .. ':changes', uri, ARGV[i + 1])
    redis.call('HSET', rk(rid) .. ':depth', uri, ARGV[i + 2])
    redis.call('RPUSH', rk(rid) .. ':todo', uri)
    added = added + 1
  end
end
if added > 0 then
  redis.call('HINCRBY', rk(rid), 'scanned', added)
  redis.call('HINCRBY', rk(rid), 'queued', added)
end
return {'next', admit(rid, now, queued), 0}
"""

# ARGV: P, member, token, run, status, now — the finish step closes the run.
_CLOSE = _PRELUDE + """
local m, token, rid = ARGV[2], ARGV[3], ARGV[4]
if m ~= '' and redis.call('HGET', P .. 'lease:holders', m) ~= token then return 'lost' end
local status = ARGV[5]
if status == 'auto' then
  status = (redis.call('HLEN', rk(rid) .. ':errors') > 0) and 'complete_with_errors' or 'complete'
end
close_run(rid, status, tonumber(ARGV[6]))
return redis.call('HGET', rk(rid), 'status')
"""

# ARGV: P, member, run, step, uri, now, base — re-drive an expired lease (its holder is presumed lost).
_REDRIVE = _PRELUDE + """
local m, rid, step, uri = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now, base = tonumber(ARGV[6]), tonumber(ARGV[7])
local score = redis.call('ZSCORE', P .. 'leases', m)
if not score or tonumber(score) > now then return 0 end
if not unfinished(rid) then drop_lease(m) return -1 end
local k = redis.call('HINCRBY', P .. 'lease:redrives', m, 1)
redis.call('HDEL', P .. 'lease:holders', m)
-- A step that waits in a long queue is re-sent with growing gaps, not every sweep.
redis.call('ZADD', P .. 'leases', now + base * math.min(2 ^ (k - 1), 16), m)
if BATCHED[step] then enqueue(rid, step, uri, now) end
return 1
"""

# ARGV: P, now — every step queued but held by nobody becomes due now, so the next sweep re-sends it.
_HASTEN_UNHELD = _PRELUDE + """
local now, n = tonumber(ARGV[2]), 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', P .. 'leases', '(' .. now, '+inf')) do
  if redis.call('HEXISTS', P .. 'lease:holders', m) == 0 then
    redis.call('ZADD', P .. 'leases', now, m)
    n = n + 1
  end
end
return n
"""

# ARGV: P, collection, step, token, now, lease, max_deliveries, queued, max_docs, max_weight
# Take a batch of a batched step: due documents, oldest first, until max_docs or max_weight is reached
# (the first is always taken), each by its own lease.
_TAKE = _PRELUDE + """
local key, step = P .. 'col:' .. ARGV[2] .. ':due:' .. ARGV[3], ARGV[3]
local token, now, lease = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local max_docs, max_weight = tonumber(ARGV[9]), tonumber(ARGV[10])
redis.call('DEL', key .. ':later')  -- what is queued from now on schedules its own batch
local taken, failed, weight = {}, {}, 0
while #taken < max_docs and weight < max_weight do
  local entry = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'LIMIT', 0, 1)[1]
  if not entry then break end
  local cut = string.find(entry, SEP, 1, true)
  local rid, uri = string.sub(entry, 1, cut - 1), string.sub(entry, cut + 1)
  local m = member(rid, step, uri)
  local w = weight_of(m)
  dequeue(key, entry, m)
  local got = take(m, rid, step, uri, token, now, lease, tonumber(ARGV[7]), tonumber(ARGV[8]))
  if got[1] == 'ok' then
    table.insert(taken, entry)
    weight = weight + w
  elseif got[1] == 'poisoned' then table.insert(failed, {rid, got[2], got[3]}) end
end
return {taken, failed}
"""

# ARGV: P, collection, step, full_weight, delay_ms, upstream states (comma list), runs... — is a batch
# task due now, later (one delayed task at a time), or already on its way? Waiting for a fuller batch
# is pointless when none of the given runs has a document that could still join it: none queued, none
# active in an upstream state (the end of a run). A run with too many active documents to look through
# cheaply is taken to have more coming (a smaller batch, or a delay, is all a wrong guess costs).
_SCHEDULE = _PRELUDE + """
local key = P .. 'col:' .. ARGV[2] .. ':due:' .. ARGV[3]
if redis.call('ZCARD', key) == 0 then return 0 end
if tonumber(redis.call('GET', key .. ':weight') or '0') >= tonumber(ARGV[4]) then return 1 end
if #ARGV >= 7 then
  local upstream = {}
  for state in string.gmatch(ARGV[6], '[^,]+') do upstream[state] = true end
  local more = false
  for i = 7, #ARGV do
    local rid = ARGV[i]
    if unfinished(rid) then
      local active = rk(rid) .. ':active'
      if redis.call('HGET', rk(rid), 'listed') ~= '1' or redis.call('LLEN', rk(rid) .. ':todo') > 0
         or redis.call('SCARD', active) > """ + str(DRAIN_SCAN_LIMIT) + """ then
        more = true
      else
        for _, uri in ipairs(redis.call('SMEMBERS', active)) do
          if upstream[redis.call('HGET', rk(rid) .. ':docs', uri)] then more = true break end
        end
      end
      if more then break end
    end
  end
  if not more then return 1 end
end
if redis.call('SET', key .. ':later', '1', 'NX', 'PX', ARGV[5]) then return 2 end
return 0
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class Moved:
    """What a transition asks the caller to send next: admitted documents, and whether the run is due to finish."""

    status: str
    admitted: list[str] = field(default_factory=list)
    finish_due: bool = False
    detail: Any = None

    @classmethod
    def parse(cls, reply: Any) -> Moved:
        status = _text(reply[0])
        if status in ("terminal", "poisoned", "gave_up", "next") and len(reply) >= 3:
            return cls(status, [_text(u) for u in reply[1]], bool(int(reply[2])))
        return cls(status, detail=reply[1] if len(reply) > 1 else None)


@dataclass(frozen=True)
class Commit:
    """One held step's end: the state it moves to and the steps that follow (see StateMachine.commit)."""

    run_id: str
    step: str
    uri: str
    token: str
    next_state: str
    next_steps: tuple[str, ...] = ()
    siblings: tuple[str, ...] = ()
    reason: str = ""
    weight: int = 1


class StateMachine:
    """The transitions, each one Lua script; timing settings come from the caller's Settings."""

    def __init__(self, redis: Any, *, lease_seconds: float, redrive_after_seconds: float,
                 max_deliveries: int, max_retries: int) -> None:
        self.redis = redis
        self.lease = lease_seconds
        self.queued = redrive_after_seconds
        self.max_deliveries = max_deliveries
        self.max_retries = max_retries
        register = redis.register_script
        self._acquire, self._renew, self._commit = register(_ACQUIRE), register(_RENEW), register(_COMMIT)
        self._fail_attempt, self._listed = register(_FAIL_ATTEMPT), register(_LISTED)
        self._start_known, self._close, self._redrive = register(_START_KNOWN), register(_CLOSE), register(_REDRIVE)
        self._hasten_unheld = register(_HASTEN_UNHELD)
        self._take, self._claim_document, self._defer = register(_TAKE), register(_CLAIM_DOCUMENT), register(_DEFER)
        self._schedule = register(_SCHEDULE)
        self._discover = register(_DISCOVER)

    def acquire(self, run_id: str, step: str, uri: str, token: str) -> Moved:
        m = keys.member(run_id, step, uri)
        return Moved.parse(self._acquire(args=[keys.PREFIX, m, run_id, step, uri, token, time.time(), self.lease,
                                               self.max_deliveries, self.queued]))

    def renew(self, token: str, members: list[str]) -> int:
        return int(self._renew(args=[keys.PREFIX, token, time.time() + self.lease, *members])) if members else 0

    def commit(self, run_id: str, step: str, uri: str, token: str, next_state: str,
               next_steps: tuple[str, ...] = (), siblings: tuple[str, ...] = (), reason: str = "",
               weight: int = 1) -> Moved:
        """End a held step: to the next state (creating its steps' leases and queueing batched ones), or terminal."""
        return self.commit_many([Commit(run_id, step, uri, token, next_state, next_steps, siblings, reason, weight)])[0]

    def commit_many(self, commits: list[Commit]) -> list[Moved]:
        """Several commits in one round trip; each is still its own atomic transition."""
        pipe = self.redis.pipeline(transaction=False)
        now = time.time()
        for c in commits:
            self._commit(args=[keys.PREFIX, keys.member(c.run_id, c.step, c.uri), c.token, c.run_id, c.uri, now,
                               self.queued, c.next_state, ",".join(c.next_steps), c.reason, c.weight,
                               *(keys.member(c.run_id, s, c.uri) for s in c.siblings)], client=pipe)
        return [Moved.parse(reply) for reply in pipe.execute()]

    def fail_attempt(self, run_id: str, step: str, uri: str, token: str, retry_in: float, reason: str) -> Moved:
        m = keys.member(run_id, step, uri)
        return Moved.parse(self._fail_attempt(args=[
            keys.PREFIX, m, token, run_id, uri, time.time(), self.queued, time.time() + retry_in + self.queued,
            self.max_retries, reason, step]))

    def listed(self, run_id: str, token: str) -> Moved:
        return Moved.parse(self._listed(args=[keys.PREFIX, keys.member(run_id, LIST), token, run_id, time.time(),
                                              self.queued]))

    def start_known(self, run_id: str) -> Moved:
        return Moved.parse(self._start_known(args=[keys.PREFIX, run_id, time.time(), self.queued]))

    def close(self, run_id: str, token: str | None, status: str = "auto") -> str:
        m = keys.member(run_id, FINISH) if token else ""
        return _text(self._close(args=[keys.PREFIX, m, token or "", run_id, status, time.time()]))

    def redrive(self, lease_member: str, base: float) -> int:
        run_id, step, uri = keys.split_member(lease_member)
        return int(self._redrive(args=[keys.PREFIX, lease_member, run_id, step, uri, time.time(), base]))

    def hasten_unheld(self) -> int:
        """Make every queued step that no worker holds due now (the next sweep re-sends it); how many.

        For a worker that was lost: the messages it had taken but not started (a delayed batch message
        waits in the worker's memory until it is due) died with it, and their steps would otherwise
        wait out the re-send delay. A step whose message is still queued runs once; its duplicate
        finds it held or done and stops.
        """
        return int(self._hasten_unheld(args=[keys.PREFIX, time.time()]))

    def take_batch(self, collection: str, step: str, token: str, max_docs: int,
                   max_weight: float = float("inf")) -> tuple[list[tuple[str, str]], list[Moved]]:
        """Lease due documents of a collection for one batch of a batched step (dense, sparse, write)."""
        weight_limit = max_weight if max_weight != float("inf") else 2 ** 53
        taken, poisoned = self._take(args=[keys.PREFIX, collection, step, token, time.time(), self.lease,
                                           self.max_deliveries, self.queued, max_docs, weight_limit])
        entries = [tuple(_text(e).split(keys.SEP, 1)) for e in taken]
        return entries, [Moved("poisoned", [_text(u) for u in p[1]], bool(int(p[2])), detail=_text(p[0]))
                         for p in poisoned]

    def batch_due(self, collection: str, step: str, full_weight: float, delay: float,
                  runs: tuple[str, ...] = ()) -> str | None:
        """Whether a batch task should be sent: "now", "later" (in `delay`), or None (one is on its way).

        "now" when a full batch waits, or when `runs` (those whose documents just joined the queue)
        have nothing left that could join it: the end of a run is not held back by the delay.
        """
        reply = int(self._schedule(args=[keys.PREFIX, collection, step, full_weight, max(1, int(delay * 1000)),
                                         ",".join(UPSTREAM_STATES[step]), *sorted(set(runs))]))
        return {1: "now", 2: "later"}.get(reply)

    def claim_document(self, run_id: str, uri: str, claim_key: str, ttl: int) -> bool:
        """Whether this run may work on this document now (no other unfinished run has it in flight)."""
        return bool(self._claim_document(args=[keys.PREFIX, claim_key, run_id, uri, ttl]))

    def defer(self, run_id: str, step: str, uri: str, token: str, retry_in: float) -> bool:
        """Give a held step back to run again in `retry_in` seconds (waiting is not a failure or a lost worker)."""
        m = keys.member(run_id, step, uri)
        return bool(self._defer(args=[keys.PREFIX, m, token, time.time() + retry_in + self.queued]))

    def discover(self, run_id: str, token: str, parent: str, found: list[tuple[str, int, str]],
                 max_pages: int) -> Moved:
        """Add documents a held fetch of `parent` found, as discovery admitted them: (uri, depth, change JSON)."""
        triples = [part for uri, depth, change in found for part in (uri, change, depth)]
        return Moved.parse(self._discover(args=[keys.PREFIX, keys.member(run_id, FETCH, parent), token, run_id,
                                                parent, time.time(), self.queued, max_pages, *triples]))

    def stalled(self, run_id: str) -> list[tuple[str, str, float]]:
        """(step, uri, when its lease expired) of the run's steps whose holder stopped renewing (a lost worker)."""
        return [step for step, held in self._overdue(run_id) if held]

    def unsent(self, run_id: str) -> list[tuple[str, str, float]]:
        """(step, uri, when it was due to start) of the run's steps queued but never taken in time: no worker
        held them (their message was lost, or the worker that was to send it died first); re-sent like stalled ones."""
        return [step for step, held in self._overdue(run_id) if not held]

    def _overdue(self, run_id: str) -> list[tuple[tuple[str, str, float], bool]]:
        prefix = run_id + keys.SEP
        overdue = [(member, float(score)) for member, score in ((_text(m), s) for m, s in
                   self.redis.zrangebyscore(keys.LEASES, "-inf", time.time(), withscores=True))
                   if member.startswith(prefix)]
        holders = self.redis.hmget(keys.HOLDERS, [m for m, _ in overdue]) if overdue else []
        return [((*keys.split_member(m)[1:], at), holder is not None) for (m, at), holder in zip(overdue, holders)]

    def expired(self, limit: int = 1000) -> list[str]:
        return [_text(m) for m in self.redis.zrangebyscore(keys.LEASES, "-inf", time.time(), start=0, num=limit)]
