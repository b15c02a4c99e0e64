// Calls to the Cloudflare API for what wrangler has no command for: which
// routes are published (GET), and moving a route another Worker serves to
// this one (PUT, --take-over-routes only). Same base URL and token as
// wrangler: CLOUDFLARE_API_BASE_URL, CLOUDFLARE_API_TOKEN.

const DEFAULT_BASE = "https://api.cloudflare.com/client/v4";

export class CloudflareApi {
  constructor({ baseUrl = process.env.CLOUDFLARE_API_BASE_URL || DEFAULT_BASE, token = process.env.CLOUDFLARE_API_TOKEN, timeoutMs = 30_000 } = {}) {
    Object.assign(this, { baseUrl: baseUrl.replace(/\/+$/, ""), token, timeoutMs });
  }

  /** GET path (with query) -> the envelope's result; throws with the API's errors. */
  get(path, query = {}) {
    return this.#call("GET", path, query);
  }

  /** PUT path with a JSON body -> the envelope's result; throws with the API's errors. */
  put(path, json) {
    return this.#call("PUT", path, {}, json);
  }

  async #call(method, path, query, json) {
    const url = new URL(`${this.baseUrl}${path}`);
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
    const res = await fetch(url, {
      method,
      headers: { authorization: `Bearer ${this.token}`, accept: "application/json", ...(json ? { "content-type": "application/json" } : {}) },
      ...(json ? { body: JSON.stringify(json) } : {}),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    const body = await res.json().catch(() => null);
    if (!res.ok || !body?.success) {
      const errors = (body?.errors ?? []).map((e) => `${e.message} [code: ${e.code}]`).join("; ");
      throw new Error(`${method} ${url.pathname} answered ${res.status}${errors ? `: ${errors}` : ""}`);
    }
    return body.result;
  }
}
