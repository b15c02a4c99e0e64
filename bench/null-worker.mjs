// The benchmark's baseline: a worker that does nothing but hand the
// incoming request to fetch() with the URL's host rewritten to the upstream
// (env.UPSTREAM, host:port, plain HTTP). Same method, headers and body
// stream, redirects not followed, like the router.
//
// With env.LOG = "1" it also writes one JSON log line per request, the size
// and shape of the router's request log (the `null-log` extra configuration
// of bench/run.sh, to price console.log on its own).
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    url.protocol = "http:";
    url.host = env.UPSTREAM;
    const response = await fetch(url, request);
    if (env.LOG === "1") {
      console.log(
        JSON.stringify({
          ruleset: "session_token",
          method: request.method,
          path: url.pathname,
          rule: "session_cookie",
          action: "classify",
          classify_type: "SESSION_PREFIX",
          cache: "memory",
          upstream: env.UPSTREAM,
          status: response.status,
          duration_ms: 0,
        }),
      );
    }
    return response;
  },
};
