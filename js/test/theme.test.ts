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

test("readable: keeps the hue, reaches 4.5:1 on dark and light fills", async () => {
  const { contrast, readable } = await import("../src/view/theme");
  for (const [fg, bg] of [["#f44336", "#3f4a54"], ["#6e6e6e", "#111111"], ["#d32f2f", "#ffffff"], ["#ffb74d", "#fff3e0"]]) {
    const c = readable(fg, bg);
    assert.ok(contrast(c, bg) >= 4.5, `${c} on ${bg}: ${contrast(c, bg)}`);
  }
  assert.equal(readable("#000000", "#ffffff"), "#000000"); // already readable: unchanged
  assert.ok(Math.abs(contrast("#ffffff", "#000000") - 21) < 1e-9);
});
