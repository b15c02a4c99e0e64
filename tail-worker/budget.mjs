// How many error events one tail worker isolate sends a minute: a fixed
// window per isolate (isolates share nothing; Cloudflare runs a few per
// location, so the account-wide rate is this times the isolates), within
// which a fingerprint already sent is not sent again and at most `limit`
// events go out. What the window holds back is counted, and said once per
// window in one `warning` event.

const WINDOW_MS = 60_000;

export class MinuteBudget {
  #start = -Infinity;
  #sent = new Set();
  #held = 0;
  #told = false;

  /**
   * Of `drafts` (deduplicated, `{ fingerprint, event }`), those this
   * window lets through at `now`, marked as sent; `held`: how many it held
   * back (repeats of a fingerprint sent this window, or over the limit),
   * `tell`: whether the caller should say so now (the first time in this
   * window that something was held back over the limit).
   */
  admit(drafts, limit, now = Date.now()) {
    if (now - this.#start >= WINDOW_MS) {
      this.#start = now;
      this.#sent.clear();
      this.#held = 0;
      this.#told = false;
    }
    const admitted = [];
    let overLimit = 0;
    for (const d of drafts) {
      if (this.#sent.has(d.fingerprint)) this.#held += 1;
      else if (this.#sent.size >= limit) overLimit += 1;
      else {
        this.#sent.add(d.fingerprint);
        admitted.push(d);
      }
    }
    this.#held += overLimit;
    const tell = overLimit > 0 && !this.#told;
    if (tell) this.#told = true;
    return { admitted, held: this.#held, tell, until: this.#start + WINDOW_MS };
  }
}
