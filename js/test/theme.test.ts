// The theme's font as Cytoscape must get it (its style parser refuses single quotes).
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { canvasFont } from "../src/view/theme";

test("canvasFont: JupyterLab's single-quoted font list becomes one Cytoscape accepts", () => {
  const jp = "system-ui, -apple-system, blinkmacsystemfont, 'Segoe UI', helvetica, arial, sans-serif, 'Apple Color Emoji'";
  const out = canvasFont(jp);
  assert.equal(out, 'system-ui, -apple-system, blinkmacsystemfont, "Segoe UI", helvetica, arial, sans-serif, "Apple Color Emoji"');
  assert.match(out, /^([\w- "]+(?:\s*,\s*[\w- "]+)*)$/); // Cytoscape's own fontFamily rule
  assert.equal(canvasFont(""), "sans-serif");
  assert.equal(canvasFont("'A;B', serif"), '"AB", serif'); // characters Cytoscape refuses are dropped
});
