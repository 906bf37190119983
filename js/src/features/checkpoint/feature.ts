// Checkpoint mode: marks on module boxes (the `checkpoints` trait) answer at once, with no kernel:
// saved-for-backward bytes before -> after on each marked box and in total, the share of forward
// re-run, and leaves a reentrant checkpoint cuts off drawn as what-if lost leaves with their cause.
// The shared mode (features/modes) holds the button, bar and banner; Verify asks Python to re-run with the
// calls really checkpointed (question "checkpoint": `checkpoint_verified`).
import type { StylesheetJson } from "cytoscape";
import type { Core, FeatureFactory } from "../../core/context";
import type { Decoration, Feature } from "../../core/feature";
import { repaint } from "../../core/paint";
import type { Theme } from "../../view/theme";
import { addClass } from "../../state/classes";
import { CHECKPOINT_CSS, CHECKPOINT_MODE, checkpointBanner } from "./panel";
import { createMode } from "../../core/mode";
import { nodeKey } from "../../state/quotient";
import { cycleMark, evaluate, formatBytes, hasTable, lostCause, normalizeMarks, sameMarks, summaryText, verdictText, type CheckpointAnswer, type Marks } from "./state";

export interface CheckpointHooks {
  /** The answer for the current marks (null: the graph has no table). */
  checkpointAnswer(): CheckpointAnswer | null;
  checkpointMode(): boolean;
  setCheckpointMode(on: boolean): void;
  /** Milliseconds from the last user mark to its styles applied. */
  lastCheckpointMs(): number;
}

const BOX_KINDS = new Set(["collapsed", "expanded"]);

export const checkpoint: FeatureFactory<CheckpointHooks> = (core: Core, slots): Feature<CheckpointHooks> => {
  const ck = { marks: {} as Marks, answer: null as CheckpointAnswer | null };
  const mode = createMode(core, slots, CHECKPOINT_MODE, { clear: () => setMarks({}), switched: () => repaint(core) });

  function table() {
    const t = core.model.get("checkpoint_table");
    return hasTable(t) ? t : null;
  }

  function recompute(): void {
    const t = table();
    ck.answer = t ? evaluate(t, core.payload, ck.marks) : null;
    core.root.dataset.checkpointLost = String(ck.answer?.lost.length ?? 0);
    core.root.dataset.checkpointAfter = String(ck.answer?.after ?? "");
  }

  /** Marks set by the user: saved to the trait, then drawn. */
  function setMarks(next: Marks): void {
    ck.marks = next;
    core.model.set("checkpoints", { ...next });
    core.model.save_changes();
    recompute();
    repaint(core);
  }

  function updatePanel(): void {
    const a = ck.answer;
    const marked = Object.keys(ck.marks).length > 0;
    mode.hidden(!table());
    mode.show(
      {
        visible: mode.on || marked,
        verdict: a ? verdictText(a) : "",
        summary: a ? summaryText(a) : "This graph has no module calls to checkpoint (trace under gv.capture).",
        bad: !!a && a.lost.length > 0,
        marked,
        canVerify: !!core.model.get("can_verify") && marked,
      },
      checkpointBanner(core.model.get("checkpoint_verified"), ck.marks),
    );
  }

  return {
    name: "checkpoint",
    css: CHECKPOINT_CSS,
    styles: checkpointStyles,
    traits: {
      checkpoints() {
        const incoming = normalizeMarks(core.model.get("checkpoints"));
        if (sameMarks(incoming, ck.marks)) return;
        ck.marks = incoming;
        recompute();
        repaint(core);
      },
      checkpoint_table() {
        recompute();
        repaint(core);
      },
      checkpoint_verified: () => repaint(core),
    },
    loaded() {
      ck.marks = normalizeMarks(core.model.get("checkpoints"));
      recompute();
    },
    decorate: () => decorateMarks(core, ck.answer, ck.marks),
    subject() {
      // The view is about what the marks cost in gradients: the first leaves they cut off (an adapter).
      const lost = ck.answer?.lost ?? [];
      return lost.length ? { keys: lost.slice(0, 4).map(nodeKey), withLoss: false, name: "the leaves losing gradient" } : null;
    },
    painted: updatePanel,
    tooltip(key) {
      const a = ck.answer;
      if (!a) return "";
      if (key.startsWith("n:")) return lostCause(a, core.payload, key.slice(2));
      const call = key.slice(2);
      if (!key.startsWith("c:") || !(call in ck.marks)) return "";
      if (a.ignored.includes(call)) return "Checkpoint mark inside a reentrant checkpoint no gradient reaches: no effect.";
      return `Checkpointed (${ck.marks[call].replace("_", "-")}): saved for backward ${formatBytes(a.perCallBefore[call] ?? 0)} → ${formatBytes(a.perCallAfter[call] ?? 0)}`;
    },
    details(node) {
      const cause = ck.answer ? lostCause(ck.answer, core.payload, node.id) : "";
      return cause ? [["checkpoint", cause]] : [];
    },
    click(key, kind, shift) {
      if (!BOX_KINDS.has(kind) || !(mode.on || shift) || !table()) return false;
      mode.edit(() => setMarks(cycleMark(ck.marks, key.slice(2))));
      return true;
    },
    hooks: {
      checkpointAnswer: () => (ck.answer ? { ...ck.answer, lost: [...ck.answer.lost] } : null),
      checkpointMode: () => mode.on,
      setCheckpointMode: (on) => mode.set(on),
      lastCheckpointMs: () => mode.lastMs,
    },
  };
};

/** Marked boxes get a class and a "before -> after" line; lost leaves the what-if's lost class. */
function decorateMarks(core: Core, a: CheckpointAnswer | null, marks: Marks): Decoration | null {
  if (!a || (!a.outer.length && !a.ignored.length)) return null;
  const classes = new Map<string, string>();
  const lines = new Map<string, string[]>();
  for (const c of [...a.outer, ...a.nested]) {
    addClass(classes, "c:" + c, marks[c] === "reentrant" ? "ck-reentrant" : "ck-nonreentrant");
    const tag = marks[c] === "reentrant" ? "ckpt reentrant" : "ckpt";
    lines.set("c:" + c, [`${tag}: ${formatBytes(a.perCallBefore[c] ?? 0)} → ${formatBytes(a.perCallAfter[c] ?? 0)}`]);
  }
  for (const c of a.ignored) addClass(classes, "c:" + c, "ck-ignored");
  const parent = new Map(core.payload.calls.map((c) => [c.id, c.parent] as const));
  const lost = new Set(a.lost);
  const boxes = new Set<string>();
  for (const n of core.payload.nodes) {
    if (!lost.has(n.id)) continue;
    addClass(classes, "n:" + n.id, "wi-lost");
    for (let c = n.call; c && !boxes.has(c); c = parent.get(c) ?? "") boxes.add(c);
  }
  for (const c of boxes) addClass(classes, "c:" + c, "wi-haslost");
  return { classes, lines };
}

/** Checkpointed boxes: a double border (teal non-reentrant, amber reentrant); ignored marks dotted. */
function checkpointStyles(t: Theme): StylesheetJson {
  return [
    { selector: "node.ck-nonreentrant", style: { "border-color": "#00897b", "border-width": 4, "border-style": "double" } },
    { selector: "node.ck-reentrant", style: { "border-color": "#f9a825", "border-width": 4, "border-style": "double" } },
    { selector: "node.ck-ignored", style: { "border-style": "dotted", "border-color": t.textMuted } },
  ];
}
