// The driver's HTTP client (node:http, one kept-alive connection,
// accept-encoding: identity) for probes, warming, cold starts and streams.
import http from "node:http";

export const MiB = 1024 * 1024;

export const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

/**
 * One request; resolves to `{status, headers, bytes, text}` (text: the
 * first MiB). `bodyBytes` streams that many bytes from a reused 1 MiB
 * buffer; `onData` gets the body's chunks instead of keeping them.
 */
export function request(url, { method = "GET", headers = {}, body, bodyBytes, onData } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method, agent, headers: { "accept-encoding": "identity", ...headers } },
      (res) => {
        let bytes = 0;
        const chunks = [];
        res.on("data", (c) => {
          bytes += c.length;
          if (onData) onData(c);
          else if (bytes < 1 << 20) chunks.push(c);
        });
        res.on("end", () =>
          resolve({ status: res.statusCode, headers: res.headers, bytes, text: Buffer.concat(chunks).toString() }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    if (bodyBytes !== undefined) {
      // Streams bodyBytes bytes from a reused 1 MiB buffer, honouring backpressure.
      const chunk = Buffer.alloc(MiB, 0x61);
      (async () => {
        let left = bodyBytes;
        while (left > 0) {
          const n = Math.min(left, chunk.length);
          if (!req.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
            await new Promise((r) => req.once("drain", r));
          }
          left -= n;
        }
        req.end();
      })().catch(reject);
    } else {
      req.end(body);
    }
  });
}
