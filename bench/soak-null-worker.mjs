// The soak's null worker (`bash bench/soak.sh --worker null`, docs/soak.md,
// "The null worker"): in the router's place, under the same traffic, the
// least a worker in front of the cells can do. It takes the cell the soak
// expects from the request's `x-soak-cell` header (every soak request
// carries it, for the router too), rewrites the URL's host to that cell's
// address (env.SOAK_CELLS: JSON {"<cell>": "host:port"}, the legacy cell 1
// when the header names none) and hands the request to fetch() as it came:
// method, headers, body stream, a WebSocket handshake, redirects not
// followed. No rules, no Topology Service, no cache, no wasm. A cell that
// cannot be reached gets a 502, as the router answers. One JSON log line per
// request, the size and shape of the router's (the soak runs the router
// with GITLAB_REQUEST_LOG=all), so that workerd's log pipe carries as much.
let cells = null;

export default {
  async fetch(request, env) {
    const started = Date.now();
    cells ??= JSON.parse(env.SOAK_CELLS);
    const upstream = cells[request.headers.get("x-soak-cell")] ?? cells["1"];
    const url = new URL(request.url);
    url.protocol = "http:";
    url.host = upstream;
    let response;
    let error;
    try {
      response = await fetch(url, request);
    } catch (e) {
      error = `upstream ${upstream}: ${e.message}`;
      response = new Response(`${error}\n`, { status: 502 });
    }
    console.log(
      JSON.stringify({
        ruleset: "null",
        method: request.method,
        path: url.pathname,
        rule: "null",
        action: "proxy",
        classify_type: "NONE",
        cache: "none",
        upstream,
        ...(error ? { error } : {}),
        status: response.status,
        duration_ms: Date.now() - started,
      }),
    );
    return response;
  },
};
