-- wrk script for bench/heartbeat.py: heartbeats of random seeded devices.
--
--   wrk -t THREADS -s bench/heartbeat.lua URL -- SESSIONS [RATE THREADS]
--
-- Device i (1..SESSIONS) has the AnonymousId 00000000-0000-4000-8000-<i as 12 hex digits>,
-- as bench/heartbeat.py seeds them. Without RATE, wrk's closed loop: each connection sends
-- its next heartbeat as soon as the last one is answered. With RATE (heartbeats per second,
-- all threads together), each thread paces its share on a fixed schedule (wrk's `delay`
-- hook, LuaJIT's FFI for a microsecond clock), stamps each request's scheduled time into
-- X-Request-Id, which the API echoes, and measures latency from that scheduled time: a
-- server that falls behind is charged for its queue, not only for its service time
-- (wrk2 is not packaged, so this is its pacing, done in a script). The last line printed
-- is one JSON object.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } pin_timespec;
int clock_gettime(int clock_id, pin_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local clock = ffi.new("pin_timespec")

local function now_us()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, clock)
  return tonumber(clock.tv_sec) * 1e6 + tonumber(clock.tv_nsec) / 1e3
end

local threads = {}
local sessions, rate, interval_us, next_slot_us
local plans, plan_first, plan_last = {}, 1, 0
latencies_us, latency_count, stamped_misses = {}, 0, 0

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  sessions = tonumber(args[1])
  rate = tonumber(args[2] or "0")
  math.randomseed(now_us() + (id or 0))
  if rate > 0 then
    -- Each thread paces its share of the rate. The thread count comes as an argument:
    -- `threads` is filled by setup() in wrk's main Lua state, and each thread's state,
    -- where init() runs, has its own, empty one.
    interval_us = 1e6 * tonumber(args[3] or "1") / rate
  end
end

local function device(i)
  return string.format("00000000-0000-4000-8000-%012x", i)
end

function delay()
  if not rate or rate <= 0 then
    return 0
  end
  local now = now_us()
  if not next_slot_us then
    next_slot_us = now
  end
  local planned = next_slot_us
  next_slot_us = next_slot_us + interval_us
  plan_last = plan_last + 1
  plans[plan_last] = planned
  local wait_ms = (planned - now) / 1000
  if wait_ms < 0 then
    return 0
  end
  return math.floor(wait_ms)
end

function request()
  local headers = {
    ["X-Anonymous-Id"] = device(math.random(1, sessions)),
    ["Content-Length"] = "0",
  }
  if rate and rate > 0 and plan_first <= plan_last then
    headers["X-Request-Id"] = string.format("plan-%.0f", plans[plan_first])
    plans[plan_first] = nil
    plan_first = plan_first + 1
  end
  return wrk.format("POST", "/api/user-activity/sessions/heartbeat", headers)
end

if tonumber((os.getenv("PIN_BENCH_PACED") or "0")) == 1 then
  function response(status, headers, body)
    local stamp = headers["x-request-id"] or headers["X-Request-Id"]
    local planned = stamp and tonumber(string.match(stamp, "^plan%-(%d+)$"))
    if not planned then
      stamped_misses = stamped_misses + 1
      return
    end
    latency_count = latency_count + 1
    latencies_us[latency_count] = now_us() - planned
  end
end

local function percentile(sorted, fraction)
  if #sorted == 0 then
    return 0
  end
  local index = math.min(#sorted, math.floor(#sorted * fraction) + 1)
  return sorted[index]
end

function done(summary, latency, requests)
  local seconds = summary.duration / 1e6
  local errors = summary.errors
  local failed = errors.status + errors.connect + errors.read + errors.write + errors.timeout
  local result = {
    requests = summary.requests,
    failed = failed,
    non2xx = errors.status,
    seconds = seconds,
    requestsPerSecond = (summary.requests - failed) / seconds,
    p50Ms = latency:percentile(50) / 1000,
    p99Ms = latency:percentile(99) / 1000,
  }
  local paced = {}
  local misses = 0
  for _, thread in ipairs(threads) do
    local values = thread:get("latencies_us")
    local count = thread:get("latency_count") or 0
    misses = misses + (thread:get("stamped_misses") or 0)
    for i = 1, count do
      paced[#paced + 1] = values[i]
    end
  end
  local fields = {}
  if #paced > 0 then
    table.sort(paced)
    result.scheduledP50Ms = percentile(paced, 0.50) / 1000
    result.scheduledP99Ms = percentile(paced, 0.99) / 1000
    result.scheduledMaxMs = paced[#paced] / 1000
    result.unstamped = misses
  end
  for key, value in pairs(result) do
    fields[#fields + 1] = string.format("%q: %s", key, tostring(value))
  end
  io.write("{" .. table.concat(fields, ", ") .. "}\n")
end
