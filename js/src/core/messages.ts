// Requests to Python in one envelope (`PageRequest`: id, kind, body) and their replies (`PageReply`,
// the same id). Replies are routed by id; a message that is not a reply we know of is ignored (a
// stale or foreign message must never break the page).
import type { PageReply, PageRequest } from "../payload";

type OnReply = (reply: PageReply) => void;

export class Messenger {
  private nextId = 1;
  private readonly waiting = new Map<number, OnReply>();

  constructor(private readonly send: (msg: PageRequest) => void) {}

  /** Send a request; `onReply` gets the reply with its id (once). Returns the id. */
  request(kind: PageRequest["kind"], body: PageRequest["body"], onReply?: OnReply): number {
    const id = this.nextId++;
    if (onReply) this.waiting.set(id, onReply);
    this.send({ id, kind, body });
    return id;
  }

  /** A custom message from Python (or the exported page's fake model). */
  receive(msg: unknown): void {
    if (!isReply(msg)) return;
    const onReply = this.waiting.get(msg.id);
    if (!onReply) return;
    this.waiting.delete(msg.id);
    onReply(msg);
  }

  /** Forget every request still waiting (the widget is going away). */
  dispose(): void {
    this.waiting.clear();
  }
}

function isReply(msg: unknown): msg is PageReply {
  if (typeof msg !== "object" || msg === null) return false;
  const m = msg as Partial<PageReply>;
  return m.kind === "reply" && typeof m.id === "number" && typeof m.ok === "boolean";
}
