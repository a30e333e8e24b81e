-- wrk script: each connection runs reserve -> settle cycles against the ledger.
--
-- Run with one connection per thread (`wrk -t C -c C`): the script keeps the
-- pending hold id in the thread's Lua state, so with one connection a thread's
-- next request is always the settle of the hold its last reserve created.
--
-- Arguments (after `--`): mode ("spread" or "one"), accounts (count, for spread),
-- account prefix (spread: "<prefix>0000".."<prefix>NNNN"; one: the account id
-- itself), a run tag that makes idempotency keys unique, the gateway token, and
-- optionally a pace: cycles per second per connection (0 or absent: as fast as
-- the service answers). Paced, each connection starts a cycle every 1/pace s
-- (wrk's delay(), in whole milliseconds), with its phase spread at random.
-- done() writes the samples to the file named by $BENCH_SAMPLES. With $BENCH_BUDGET_KEY
-- set, every reserve names that budget key.
--
-- wrk measures latency per request but cannot tell a reserve from a settle, so
-- the script times each request itself (CLOCK_MONOTONIC through LuaJIT's ffi,
-- from the request() call, which wrk makes just before writing it, to the
-- response() call) and writes the samples for the harness to take percentiles.

local ffi = require("ffi")
ffi.cdef([[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk_id, bench_timespec *tp);
]])
local CLOCK_MONOTONIC = 1
local ts = ffi.new("bench_timespec")

local function now_us()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
  return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3
end

-- Defaults, so that wrk's own call of request() in its main state (made once
-- to check the script, before any init()) builds a valid request.
local mode, accounts, prefix, tag, token = "spread", 1, "bench-", "x", "bench-gw"
local headers = {}
local settle_body = '{"usage":{"prompt_tokens":1200,"completion_tokens":180}}'
local budget_key = os.getenv("BENCH_BUDGET_KEY")
local budget_field = budget_key and string.format(',"budget_key":"%s"', budget_key) or ""

-- Per-thread state (each wrk thread has its own Lua state).
tid = 0
reserve_us = {}
settle_us = {}
statuses = {} -- "reserve 402" -> count
bodies = {} -- the first few error bodies
local pending = nil -- hold id waiting for its settle
local period_us = 0 -- paced: microseconds between cycle starts on this connection
local next_cycle = 0
local phase = "reserve"
local started = 0
local counter = 0

local function set_headers()
  headers = {
    ["Authorization"] = "Bearer " .. token,
    ["Content-Type"] = "application/json",
  }
end
set_headers()

local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  mode = args[1] or mode
  accounts = tonumber(args[2]) or accounts
  prefix = args[3] or prefix
  tag = args[4] or tag
  token = args[5] or token
  local pace = tonumber(args[6]) or 0
  if pace > 0 then
    period_us = 1e6 / pace
  end
  set_headers()
  math.randomseed(tid * 7919 + os.time())
end

function delay()
  if period_us == 0 or pending then
    return 0
  end
  local now = now_us()
  if next_cycle == 0 then
    next_cycle = now + math.random() * period_us
  end
  local wait = next_cycle - now
  -- behind schedule (a slow cycle): start now, and do not burst to catch up
  next_cycle = math.max(next_cycle, now) + period_us
  if wait <= 0 then
    return 0
  end
  return math.floor(wait / 1000)
end

function request()
  if pending then
    phase = "settle"
    started = now_us()
    return wrk.format("POST", "/v1/holds/" .. pending .. "/settle", headers, settle_body)
  end
  phase = "reserve"
  counter = counter + 1
  local account
  if mode == "one" then
    account = prefix
  else
    account = string.format("%s%04d", prefix, math.random(0, accounts - 1))
  end
  local body = string.format(
    '{"account_id":"%s","idempotency_key":"%s-%d-%d","model":"gpt-5-mini","max_output_tokens":256%s}',
    account, tag, tid, counter, budget_field)
  started = now_us()
  return wrk.format("POST", "/v1/holds", headers, body)
end

local function failed(status, body)
  local key = phase .. " " .. status
  statuses[key] = (statuses[key] or 0) + 1
  if #bodies < 3 then
    bodies[#bodies + 1] = key .. ": " .. string.sub(body or "", 1, 300)
  end
end

function response(status, _, body)
  local elapsed = now_us() - started
  if phase == "reserve" then
    if status == 201 then
      pending = string.match(body, '"id"%s*:%s*"([^"]+)"')
      if pending then
        reserve_us[#reserve_us + 1] = elapsed
        statuses["reserve 201"] = (statuses["reserve 201"] or 0) + 1
      else
        failed("201-without-id", body)
      end
    else
      failed(status, body)
    end
  else
    pending = nil -- a failed settle is counted, not retried: the next request starts a new cycle
    if status == 200 then
      settle_us[#settle_us + 1] = elapsed
      statuses["settle 200"] = (statuses["settle 200"] or 0) + 1
    else
      failed(status, body)
    end
  end
end

function done(summary, _, _)
  local out = assert(io.open(os.getenv("BENCH_SAMPLES") or "bench_samples.txt", "w"))
  out:write(string.format("duration_us %d\n", summary.duration))
  out:write(string.format("requests %d\n", summary.requests))
  for _, name in ipairs({ "connect", "read", "write", "status", "timeout" }) do
    out:write(string.format("socket_%s %d\n", name, summary.errors[name]))
  end
  for _, thread in ipairs(threads) do
    for key, count in pairs(thread:get("statuses")) do
      out:write(string.format("status %s %d\n", string.gsub(key, " ", ":"), count))
    end
    for _, body in ipairs(thread:get("bodies")) do
      out:write("body " .. string.gsub(body, "\n", " ") .. "\n")
    end
    for _, us in ipairs(thread:get("reserve_us")) do
      out:write(string.format("r %.1f\n", us))
    end
    for _, us in ipairs(thread:get("settle_us")) do
      out:write(string.format("s %.1f\n", us))
    end
  end
  out:close()
end
