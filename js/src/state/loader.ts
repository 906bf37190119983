// Asks for the contents of module calls (lazy mode) and waits for the answer. One request is in
// flight at a time; calls asked for meanwhile are merged into the next request. Each request has an
// id (the `PageRequest` envelope); a reply to an older id (a late answer to a timed-out request) is
// still applied, and the wait goes on. No DOM and no model: `send`, `apply` and the clock are injected.
import type { Chunk, LoadReplyBody, PageReply } from "../payload";

export const LOAD_TIMEOUT_MS = 20_000;

interface Batch {
  calls: Set<string>;
  resolve(): void;
  reject(err: Error): void;
  promise: Promise<void>;
}

function batch(): Batch {
  let resolve!: () => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { calls: new Set(), resolve, reject, promise };
}

export interface LoaderOptions {
  /** Send a "load" request for `calls`; returns the request's id. */
  send(calls: string[]): number;
  /** Apply chunks to the payload (marks their calls loaded). */
  apply(chunks: readonly Chunk[]): void;
  isLoaded(call: string): boolean;
  timeoutMs?: number;
  setTimer?: (f: () => void, ms: number) => unknown;
  clearTimer?: (t: unknown) => void;
}

export class ChunkLoader {
  private inflight: Batch | null = null;
  private inflightId = -1;
  private queued: Batch | null = null;
  private timer: unknown = null;
  private readonly opts: Required<LoaderOptions>;

  constructor(opts: LoaderOptions) {
    this.opts = {
      timeoutMs: LOAD_TIMEOUT_MS,
      setTimer: (f, ms) => setTimeout(f, ms),
      clearTimer: (t) => clearTimeout(t as ReturnType<typeof setTimeout>),
      ...opts,
    };
  }

  /** True while a request waits for its reply. */
  get busy(): boolean {
    return this.inflight !== null;
  }

  /** Resolves once every call in `calls` is loaded; rejects (message names the calls) on a timeout
   *  or an error reply. */
  load(calls: readonly string[]): Promise<void> {
    const missing = calls.filter((c) => !this.opts.isLoaded(c));
    if (!missing.length) return Promise.resolve();
    const inflight = this.inflight;
    if (inflight && missing.every((c) => inflight.calls.has(c))) return inflight.promise;
    this.queued ??= batch();
    for (const c of missing) this.queued.calls.add(c);
    const promise = this.queued.promise;
    if (!this.inflight) this.next();
    return promise;
  }

  /** A reply from Python (or the exported page's fake model) to one of our "load" requests. */
  receive(reply: PageReply): void {
    const body = (reply.ok ? reply.body : undefined) as Partial<LoadReplyBody> | undefined;
    const chunks = body && Array.isArray(body.chunks) ? body.chunks : [];
    if (chunks.length) this.opts.apply(chunks);
    const b = this.inflight;
    if (!b || reply.id !== this.inflightId) return; // stale: its chunks (if any) are applied above
    const missing = [...b.calls].filter((c) => !this.opts.isLoaded(c));
    if (!reply.ok) this.finish(new Error(failText(missing, reply.error || "the kernel could not answer")));
    else if (missing.length) this.finish(new Error(failText(missing, "the kernel sent nothing for them")));
    else this.finish(null);
  }

  /** Forget pending requests (the widget is going away or the payload changed). */
  dispose(): void {
    if (this.timer !== null) this.opts.clearTimer(this.timer);
    this.timer = null;
    const err = new Error("cancelled");
    this.inflight?.reject(err);
    this.queued?.reject(err);
    this.inflight = this.queued = null;
  }

  private next(): void {
    const b = this.queued;
    this.queued = null;
    if (!b) return;
    for (const c of [...b.calls]) if (this.opts.isLoaded(c)) b.calls.delete(c);
    if (!b.calls.size) {
      b.resolve();
      this.next();
      return;
    }
    this.inflight = b;
    this.timer = this.opts.setTimer(() => {
      this.timer = null;
      this.finish(new Error(failText([...b.calls], "no kernel is answering (re-run the cell)")));
    }, this.opts.timeoutMs);
    this.inflightId = this.opts.send([...b.calls]);
  }

  private finish(err: Error | null): void {
    const b = this.inflight;
    if (!b) return;
    if (this.timer !== null) this.opts.clearTimer(this.timer);
    this.timer = null;
    this.inflight = null;
    if (err) b.reject(err);
    else b.resolve();
    this.next();
  }
}

/** "Could not load the contents of blocks.3: <why>" (the top level is "the top level"). */
export function failText(calls: readonly string[], why: string): string {
  const names = calls.map((c) => c || "the top level");
  const shown = names.length > 3 ? `${names.slice(0, 3).join(", ")} and ${names.length - 3} more` : names.join(", ");
  return `Could not load the contents of ${shown}: ${why}`;
}
