-- wrk script for the cold-cache configuration: every request carries a
-- session cookie with a session prefix never sent before
-- (_gitlab_session=cell-<BENCH_COLD_BASE><thread, 2 digits><counter>-<32 hex>),
-- so every request misses the router's memory cache and the Cache API and
-- costs one Topology Service call (which answers 404: no cell owns it; the
-- request then goes to the legacy cell). BENCH_COLD_BASE must differ for
-- every wrk run against the same router. Output as in mix.lua.
local base = ""
local counter = 0
local hex = "0123456789abcdef0123456789abcdef"
local path = "/group-1/project-1/-/merge_requests?scope=all&state=opened"

local threads = 0
function setup(thread)
  thread:set("thread_index", threads)
  threads = threads + 1
end

function init(args)
  base = (os.getenv("BENCH_COLD_BASE") or "1") .. string.format("%02d", thread_index or 0)
end

function request()
  counter = counter + 1
  return wrk.format("GET", path, {
    ["Cookie"] = "preferred_language=en; _gitlab_session=cell-" .. base .. counter .. "-" .. hex,
    ["Accept-Encoding"] = "identity",
    ["User-Agent"] = "bench",
  })
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"mean":%.1f,"max":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.mean, latency.max))
end
