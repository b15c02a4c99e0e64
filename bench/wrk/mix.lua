-- wrk script: replays a fixed request mix round-robin, each wrk thread
-- starting at a different offset. The mix file (BENCH_MIX_FILE) has one
-- request per line, tab-separated: METHOD, PATH, then "Name: value"
-- headers; a field "@body TEXT" is the request body. Requests are
-- formatted once in init(), so wrk spends almost nothing per request.
-- done() prints one line "BENCH_JSON {...}" for bench/driver.mjs.
local requests = {}
local counter = 0

local threads = 0
function setup(thread)
  thread:set("thread_index", threads)
  threads = threads + 1
end

function init(args)
  local path = os.getenv("BENCH_MIX_FILE")
  local f = assert(io.open(path, "r"), "cannot open BENCH_MIX_FILE " .. tostring(path))
  for line in f:lines() do
    local fields = {}
    for field in string.gmatch(line, "[^\t]+") do
      fields[#fields + 1] = field
    end
    if #fields >= 2 then
      local headers, body = {}, nil
      for i = 3, #fields do
        local b = string.match(fields[i], "^@body (.*)$")
        if b then
          body = b
        else
          local name, value = string.match(fields[i], "^([^:]+):%s*(.*)$")
          headers[name] = value
        end
      end
      requests[#requests + 1] = wrk.format(fields[1], fields[2], headers, body)
    end
  end
  f:close()
  counter = (thread_index or 0) * 7919
end

function request()
  counter = counter + 1
  return requests[(counter % #requests) + 1]
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
