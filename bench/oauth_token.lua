-- wrk script for bench/tokens.py: the client-credentials grant, again and again.
--
--   wrk -s bench/oauth_token.lua URL -- BASIC_CREDENTIALS
--
-- BASIC_CREDENTIALS is base64(client_id:secret) of a registered client. Every request is
-- the same POST /oauth/token with HTTP Basic and the form body; the last line printed is
-- one JSON object.

function init(args)
  wrk.method = "POST"
  wrk.path = "/oauth/token"
  wrk.body = "grant_type=client_credentials"
  wrk.headers["Authorization"] = "Basic " .. args[1]
  wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
end

function done(summary, latency, requests)
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
