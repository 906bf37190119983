// Element classes, one space-separated string per element key (Cytoscape's form). Every decoration
// (what-if, diff, overlay, stepper) fills its own map with this, and the paint merges them with it.
export function addClass(classes: Map<string, string>, key: string, cls: string): void {
  const have = classes.get(key);
  classes.set(key, have ? have + " " + cls : cls);
}

/** Split space separated classes into the heat fill ("heat-*", one colour per element) and the rest. */
export function splitFill(classes: Map<string, string>): { fill: Map<string, string>; rest: Map<string, string> } {
  const fill = new Map<string, string>();
  const rest = new Map<string, string>();
  for (const [k, v] of classes) {
    const parts = v.split(" ").filter(Boolean);
    const heat = parts.filter((c) => c.startsWith("heat-"));
    const other = parts.filter((c) => !c.startsWith("heat-"));
    if (heat.length) fill.set(k, heat.join(" "));
    if (other.length) rest.set(k, other.join(" "));
  }
  return { fill, rest };
}
