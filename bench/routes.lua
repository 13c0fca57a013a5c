-- wrk script for bench/routes.py: one hot route's requests, again and again.
--
--   wrk -s bench/routes.lua URL -- ROUTE DEVICES INPUTS OFFSET BASIC
--
-- ROUTE names the request: start, heartbeat, heartbeat-user, action, view, refresh,
-- confirm, token, introspect. DEVICES is the number of seeded devices (device i has the
-- AnonymousId 00000000-0000-4000-8000-<i as 12 hex digits>, as bench/heartbeat.py seeds
-- them). INPUTS is a file of prepared inputs, one a line ("-" for none): access tokens
-- (heartbeat-user, introspect: one picked at random per request), refresh tokens
-- (refresh: each thread starts with its share and sends on the token each answer
-- carries, so a token is used once; with PIN_BENCH_REFRESH_OUT set, the tokens not yet
-- used are written there at the end, for the next run — those in flight when wrk stopped
-- may have been rotated, and are left out), or confirm bodies (confirm: each used once, thread t
-- of T taking lines OFFSET + t, OFFSET + t + T, …). BASIC is base64(client_id:secret) for
-- the OAuth routes. The same requests go to the floor, which answers a fixed body: there a
-- refresh token is simply used again. The last line printed is one JSON object.

local threads = {}
local route, devices, inputs
pending, in_flight = {}, {} -- globals: done() reads each thread's pending
local next_input, input_step

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_index", #threads)
end

local function read_lines(path)
  local lines = {}
  if path == "-" then
    return lines
  end
  for line in io.lines(path) do
    lines[#lines + 1] = line
  end
  return lines
end

function init(args)
  route, devices = args[1], tonumber(args[2])
  local lines = read_lines(args[3])
  local offset, index = tonumber(args[4]), thread_index or 1
  local count = tonumber(os.getenv("PIN_BENCH_THREADS") or "1")
  math.randomseed(os.time() * 1000 + index)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  if route == "token" or route == "introspect" then
    wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
    wrk.headers["Authorization"] = "Basic " .. args[5]
  end
  if route == "refresh" then
    -- This thread's share of the seeds: a queue refilled by each answer's new token.
    for i = index, #lines, count do
      pending[#pending + 1] = lines[i]
    end
  elseif route == "confirm" then
    next_input, input_step = offset + index, count
  end
  inputs = lines
end

-- A device's headers: wrk.format takes the given headers instead of wrk.headers.
local function device()
  return {
    ["X-Anonymous-Id"] = string.format("00000000-0000-4000-8000-%012x", math.random(1, devices)),
    ["Content-Type"] = "application/json",
  }
end

local function any_input()
  return inputs[math.random(1, #inputs)]
end

local VIEWED = "11111111-1111-4111-8111-111111111111"
local ACTIVITY = "/api/user-activity"

function request()
  if route == "start" then
    return wrk.format(nil, ACTIVITY .. "/sessions/start", device(), "")
  elseif route == "heartbeat" then
    return wrk.format(nil, ACTIVITY .. "/sessions/heartbeat", device(), "")
  elseif route == "heartbeat-user" then
    local headers = device()
    headers["Authorization"] = "Bearer " .. any_input()
    return wrk.format(nil, ACTIVITY .. "/sessions/heartbeat", headers, "")
  elseif route == "action" then
    local body = '{"type":"bench.click","propertyObjectId":"' .. VIEWED .. '"}'
    return wrk.format(nil, ACTIVITY .. "/actions", device(), body)
  elseif route == "view" then
    local body = '{"propertyObjectId":"' .. VIEWED .. '"}'
    return wrk.format(nil, ACTIVITY .. "/property-views", device(), body)
  elseif route == "refresh" then
    local token = table.remove(pending, 1) or inputs[1] -- none left: a refused repeat
    in_flight[#in_flight + 1] = token
    return wrk.format(nil, "/api/identity/sessions/refresh", nil,
      '{"refreshToken":"' .. token .. '"}')
  elseif route == "confirm" then
    local body = inputs[next_input] or inputs[#inputs] -- past the end: a refused repeat
    next_input = next_input + input_step
    return wrk.format(nil, "/api/identity/sign-in/confirm", nil, body)
  elseif route == "token" then
    return wrk.format(nil, "/oauth/token", nil, "grant_type=client_credentials")
  elseif route == "introspect" then
    return wrk.format(nil, "/oauth/introspect", nil, "token=" .. any_input())
  end
  error("unknown route " .. tostring(route))
end

function response(status, headers, body)
  if route ~= "refresh" then
    return
  end
  -- Answers come back in any order over the connections, but each token in flight gets
  -- one: taking the oldest off per answer keeps the counts, and every token sent leaves.
  local sent = table.remove(in_flight, 1)
  local successor = string.match(body or "", '"refreshToken":"([^"]+)"')
  if successor then
    pending[#pending + 1] = successor
  elseif status == 200 then
    pending[#pending + 1] = sent -- the floor's fixed answer: the token is still good
  end
end

local function save_unused_refresh_tokens(path)
  local out = assert(io.open(path, "w"))
  for _, thread in ipairs(threads) do
    for _, token in ipairs(thread:get("pending") or {}) do
      out:write(token, "\n")
    end
  end
  out:close()
end

function done(summary, latency, requests)
  local refresh_out = os.getenv("PIN_BENCH_REFRESH_OUT")
  if refresh_out and refresh_out ~= "" then
    save_unused_refresh_tokens(refresh_out)
  end
  local seconds = summary.duration / 1e6
  local errors = summary.errors
  local failed = errors.status + errors.connect + errors.read + errors.write + errors.timeout
  io.write(string.format(
    '{"requests": %d, "failed": %d, "non2xx": %d, "seconds": %f, "requestsPerSecond": %f, '
      .. '"p50Ms": %f, "p99Ms": %f}\n',
    summary.requests, failed, errors.status, seconds, (summary.requests - failed) / seconds,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000
  ))
end
