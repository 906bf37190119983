// Element classes, one space-separated string per element key (Cytoscape's form). Every decoration
// (what-if, diff, overlay, stepper) fills its own map with this, and the paint merges them with it.
export function addClass(classes: Map<string, string>, key: string, cls: string): void {
  const have = classes.get(key);
  classes.set(key, have ? have + " " + cls : cls);
}
