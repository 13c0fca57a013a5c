-- wrk script for bench/dev_stats_summary.py: the run as one JSON line.
--
--   wrk -s bench/dev_stats_summary.lua -H "Authorization: Bearer TOKEN" URL
--
-- The request is wrk's own (GET URL with the given header); latency percentiles are wrk's,
-- from the moment a request is sent until its response is read (closed loop).

function done(summary, latency, requests)
  local errors = summary.errors
  local seconds = summary.duration / 1e6
  io.write(string.format(
    '{"requests": %d, "non2xx": %d, "socketErrors": %d, "seconds": %.2f, '
      .. '"requestsPerSecond": %.1f, "p50Ms": %.2f, "p90Ms": %.2f, "p99Ms": %.2f, '
      .. '"maxMs": %.2f}\n',
    summary.requests, errors.status,
    errors.connect + errors.read + errors.write + errors.timeout,
    seconds, summary.requests / seconds,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000))
end
