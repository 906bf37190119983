// The model the page's code sees: anywidget's, with every synced trait validated (`validate.ts`) before
// any code reads it. `get` returns the trait's last good value (its default before any); a change to a
// malformed value is refused (its listeners are not called, the last good view stays) and reported; a
// later good value is accepted and drawn. Every listener runs through `run`, so an exception in one
// feature is reported (the error box) instead of breaking the page. No DOM here.
import type { Traits } from "../payload";
import type { Model } from "./context";
import { DEFAULTS, isTrait, validateTrait, type Problem } from "./validate";

export interface GuardReports {
  /** A new value of `trait` was refused. */
  refused(trait: keyof Traits, problems: Problem[], total: number): void;
  /** A new value of `trait` was accepted. */
  accepted(trait: keyof Traits): void;
  /** Code run for `where` threw (or its promise rejected). */
  crashed(where: string, err: unknown): void;
}

export interface Guard {
  model: Model;
  /** `fn` wrapped: what it throws, or its promise rejects with, is reported, never thrown. */
  run<A extends unknown[]>(where: string, fn: (...args: A) => unknown): (...args: A) => void;
  /** Validate every trait now (before the first draw), reporting each malformed one. */
  checkAll(): void;
}

type Handler = (...args: unknown[]) => void;

interface Entry {
  raw: unknown;
  ok: boolean;
}

export function guardModel(raw: Model, reports: GuardReports): Guard {
  const seen = new Map<string, Entry>();
  const good = new Map<string, unknown>();
  const listeners = new Map<string, Handler[]>();
  const forwarders = new Map<string, Handler>();

  function run<A extends unknown[]>(where: string, fn: (...args: A) => unknown): (...args: A) => void {
    return (...args: A): void => {
      try {
        const result = fn(...args);
        if (result instanceof Promise) result.catch((err: unknown) => reports.crashed(where, err));
      } catch (err) {
        reports.crashed(where, err);
      }
    };
  }

  /** Validate the trait's current value if it is new (by identity); true when it is good. */
  function read(name: keyof Traits): boolean {
    let value: unknown;
    try {
      value = raw.get(name);
    } catch (err) {
      reports.crashed(`reading ${name}`, err);
      return false;
    }
    const hit = seen.get(name);
    if (hit && hit.raw === value) return hit.ok;
    const checked = validateTrait(name, value);
    seen.set(name, { raw: value, ok: checked.ok });
    if (checked.ok) {
      good.set(name, checked.value);
      reports.accepted(name);
    } else reports.refused(name, checked.problems, checked.total);
    return checked.ok;
  }

  function get(name: string): unknown {
    if (!isTrait(name)) return raw.get(name as keyof Traits);
    read(name);
    return good.has(name) ? good.get(name) : DEFAULTS[name]();
  }

  function dispatch(event: string, args: unknown[]): void {
    const name = event.startsWith("change:") ? event.slice(7) : "";
    if (name && isTrait(name) && !read(name)) return;
    for (const f of [...(listeners.get(event) ?? [])]) run(event === "msg:custom" ? "a message from Python" : `the new ${name}`, f)(...args);
  }

  function on(event: string, callback: Handler): void {
    let list = listeners.get(event);
    if (!list) {
      listeners.set(event, (list = []));
      const forward: Handler = (...args) => dispatch(event, args);
      forwarders.set(event, forward);
      raw.on(event, forward);
    }
    list.push(callback);
  }

  function off(event?: string | null, callback?: Handler | null): void {
    for (const [ev, list] of [...listeners]) {
      if (event && ev !== event) continue;
      const rest = callback ? list.filter((f) => f !== callback) : [];
      if (rest.length) {
        listeners.set(ev, rest);
        continue;
      }
      listeners.delete(ev);
      raw.off(ev, forwarders.get(ev));
      forwarders.delete(ev);
    }
  }

  const model = {
    get,
    set: (name: string, value: unknown) => raw.set(name as keyof Traits, value as never),
    on,
    off,
    save_changes: () => raw.save_changes(),
    send: (content: unknown, callbacks?: unknown, buffers?: ArrayBuffer[] | ArrayBufferView[]) => raw.send(content, callbacks, buffers),
    get widget_manager() {
      return raw.widget_manager;
    },
  } as unknown as Model;

  return {
    model,
    run,
    checkAll() {
      for (const name of Object.keys(DEFAULTS)) read(name as keyof Traits);
    },
  };
}
