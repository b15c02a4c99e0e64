// A small RFC 6455 WebSocket client for the end-to-end tests, over
// node:http's upgrade (the tests must control every handshake header, Origin
// included, which Node's own WebSocket client does not let them). It masks
// what it sends, reads text, binary, fragmented, ping and close frames, and
// reports close codes; no extensions.
import http from "node:http";
import { randomBytes, createHash } from "node:crypto";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const OP = { cont: 0x0, text: 0x1, binary: 0x2, close: 0x8, ping: 0x9, pong: 0xa };

/**
 * Opens a WebSocket to `url` (http://…). Resolves with
 * `{ ok: true, status: 101, headers, ws }` after a valid handshake, or
 * `{ ok: false, status, headers, text }` when the server answers with
 * anything but a 101. Rejects on connection errors or after `timeoutMs`.
 */
export function connect(url, { headers = {}, protocols = [], timeoutMs = 10000 } = {}) {
  return new Promise((resolve, reject) => {
    const key = randomBytes(16).toString("base64");
    const req = http.request(url, {
      headers: {
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": key,
        ...(protocols.length ? { "sec-websocket-protocol": protocols.join(", ") } : {}),
        ...headers,
      },
    });
    const timer = setTimeout(() => {
      req.destroy(new Error(`WebSocket handshake to ${url} timed out after ${timeoutMs} ms`));
    }, timeoutMs);
    req.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    req.on("response", (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        clearTimeout(timer);
        resolve({ ok: false, status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString("utf8") });
      });
    });
    req.on("upgrade", (res, socket, head) => {
      clearTimeout(timer);
      const expected = createHash("sha1").update(key + GUID).digest("base64");
      if (res.headers["sec-websocket-accept"] !== expected) {
        socket.destroy();
        reject(new Error(`bad Sec-WebSocket-Accept ${res.headers["sec-websocket-accept"]} (want ${expected})`));
        return;
      }
      resolve({ ok: true, status: res.statusCode, headers: res.headers, ws: new Client(socket, head) });
    });
    req.end();
  });
}

/** One open WebSocket (client side). */
export class Client {
  constructor(socket, head) {
    this.socket = socket;
    this.buf = head?.length ? Buffer.from(head) : Buffer.alloc(0);
    this.queue = []; // received messages not yet taken
    this.waiters = []; // pending next() calls
    this.fragments = null; // { opcode, parts } while a fragmented message arrives
    this.closeSent = false;
    this.closeReceived = null; // { code, reason } from the peer
    this.closed = new Promise((resolve) => (this.resolveClosed = resolve));
    socket.setNoDelay(true);
    socket.on("data", (d) => this.onData(d));
    socket.on("error", (e) => (this.error = e));
    socket.on("close", () => this.onSocketClose());
    if (this.buf.length) queueMicrotask(() => this.onData(Buffer.alloc(0)));
  }

  /** Sends a string as a text message, a Buffer/Uint8Array as binary. */
  send(data) {
    if (typeof data === "string") this.writeFrame(OP.text, Buffer.from(data, "utf8"));
    else this.writeFrame(OP.binary, Buffer.from(data));
  }

  /** Sends a close frame (code and reason optional) once. */
  close(code, reason = "") {
    if (this.closeSent) return;
    this.closeSent = true;
    let payload = Buffer.alloc(0);
    if (code !== undefined) {
      payload = Buffer.alloc(2 + Buffer.byteLength(reason));
      payload.writeUInt16BE(code, 0);
      payload.write(reason, 2);
    }
    this.writeFrame(OP.close, payload);
  }

  /**
   * The next message: `{ type: "text", data: string }` or
   * `{ type: "binary", data: Buffer }`, or `{ type: "close", code, reason }`
   * once the peer has closed. Rejects after `timeoutMs`.
   */
  next(timeoutMs = 10000) {
    if (this.queue.length) return Promise.resolve(this.queue.shift());
    if (this.ended) return Promise.resolve(this.endMessage());
    return new Promise((resolve, reject) => {
      const waiter = { resolve, reject };
      waiter.timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(new Error(`no WebSocket message within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  /** Drops the TCP connection without a close handshake. */
  destroy() {
    this.socket.destroy();
  }

  writeFrame(opcode, payload) {
    const mask = randomBytes(4);
    const len = payload.length;
    const header = len < 126 ? Buffer.alloc(2) : len < 65536 ? Buffer.alloc(4) : Buffer.alloc(10);
    header[0] = 0x80 | opcode;
    if (len < 126) header[1] = 0x80 | len;
    else if (len < 65536) {
      header[1] = 0x80 | 126;
      header.writeUInt16BE(len, 2);
    } else {
      header[1] = 0x80 | 127;
      header.writeBigUInt64BE(BigInt(len), 2);
    }
    const masked = Buffer.allocUnsafe(len);
    for (let i = 0; i < len; i++) masked[i] = payload[i] ^ mask[i & 3];
    this.socket.write(Buffer.concat([header, mask, masked]));
  }

  deliver(msg) {
    const waiter = this.waiters.shift();
    if (waiter) {
      clearTimeout(waiter.timer);
      waiter.resolve(msg);
    } else this.queue.push(msg);
  }

  onData(data) {
    if (data.length) this.buf = this.buf.length ? Buffer.concat([this.buf, data]) : data;
    for (;;) {
      const b = this.buf;
      if (b.length < 2) return;
      const fin = (b[0] & 0x80) !== 0;
      const opcode = b[0] & 0x0f;
      const masked = (b[1] & 0x80) !== 0;
      let len = b[1] & 0x7f;
      let off = 2;
      if (len === 126) {
        if (b.length < 4) return;
        len = b.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (b.length < 10) return;
        len = Number(b.readBigUInt64BE(2));
        off = 10;
      }
      const maskKey = masked ? b.subarray(off, off + 4) : null;
      if (masked) off += 4;
      if (b.length < off + len) return;
      let payload = Buffer.from(b.subarray(off, off + len));
      this.buf = b.subarray(off + len);
      if (maskKey) for (let i = 0; i < payload.length; i++) payload[i] ^= maskKey[i & 3];
      if (masked) this.maskedFromServer = true; // a protocol error worth a test failure
      this.onFrame(fin, opcode, payload);
    }
  }

  onFrame(fin, opcode, payload) {
    switch (opcode) {
      case OP.ping:
        this.writeFrame(OP.pong, payload);
        return;
      case OP.pong:
        return;
      case OP.close: {
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        const reason = payload.length > 2 ? payload.subarray(2).toString("utf8") : "";
        this.closeReceived = { code, reason };
        if (!this.closeSent) this.close(payload.length >= 2 ? code : undefined);
        this.socket.end();
        return;
      }
      case OP.text:
      case OP.binary:
        if (fin) this.deliver(message(opcode, payload));
        else this.fragments = { opcode, parts: [payload] };
        return;
      case OP.cont:
        if (!this.fragments) return;
        this.fragments.parts.push(payload);
        if (fin) {
          const { opcode: op, parts } = this.fragments;
          this.fragments = null;
          this.deliver(message(op, Buffer.concat(parts)));
        }
        return;
      default:
        this.protocolError = `unknown opcode ${opcode}`;
    }
  }

  endMessage() {
    const c = this.closeReceived ?? { code: 1006, reason: "" };
    return { type: "close", code: c.code, reason: c.reason };
  }

  onSocketClose() {
    if (this.ended) return;
    this.ended = true;
    const end = this.endMessage();
    for (const w of this.waiters.splice(0)) {
      clearTimeout(w.timer);
      w.resolve(end);
    }
    this.resolveClosed({ ...end, clean: this.closeReceived !== null });
  }
}

function message(opcode, payload) {
  return opcode === OP.text ? { type: "text", data: payload.toString("utf8") } : { type: "binary", data: payload };
}
