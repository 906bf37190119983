// The big view's pure parts: the grid index answers exactly what a scan of every rectangle answers,
// and a query costs what it finds.
import { strict as assert } from "node:assert";
import { test } from "node:test";
import { GridIndex, type Rects } from "../src/view/bigview/grid";
import { extent, styleOf, STYLE } from "../src/view/bigview/overview";

/** A seeded generator (mulberry32): the same rectangles every run. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `n` rectangles over a `w` x `h` area, most node-sized, every 50th a big box. */
function rects(n: number, w: number, h: number, seed: number): Rects {
  const r = random(seed);
  const out = { x1: new Float64Array(n), y1: new Float64Array(n), x2: new Float64Array(n), y2: new Float64Array(n) };
  for (let i = 0; i < n; i++) {
    const big = i % 50 === 0;
    const rw = big ? r() * w * 0.5 : 40 + r() * 60;
    const rh = big ? r() * h * 0.5 : 30 + r() * 20;
    out.x1[i] = r() * w - w / 2;
    out.y1[i] = r() * h;
    out.x2[i] = out.x1[i] + rw;
    out.y2[i] = out.y1[i] + rh;
  }
  return out;
}

function scan(r: Rects, x1: number, y1: number, x2: number, y2: number): number[] {
  const found: number[] = [];
  for (let i = 0; i < r.x1.length; i++) if (r.x1[i] <= x2 && r.x2[i] >= x1 && r.y1[i] <= y2 && r.y2[i] >= y1) found.push(i);
  return found;
}

test("the grid finds exactly what a full scan finds, each item once", () => {
  for (const [n, w, h, seed] of [
    [2000, 5000, 5000, 1],
    [3000, 300, 200000, 2], // a tall chain-like strip
    [1, 10, 10, 3],
  ] as const) {
    const r = rects(n, w, h, seed);
    const grid = new GridIndex(r);
    const q = random(seed + 100);
    for (let k = 0; k < 200; k++) {
      const x1 = q() * w * 1.4 - w * 0.7;
      const y1 = q() * h * 1.2 - h * 0.1;
      const x2 = x1 + q() * w * 0.3;
      const y2 = y1 + q() * h * 0.3;
      const got = grid.within(x1, y1, x2, y2)!;
      assert.deepEqual([...got].sort((a, b) => a - b), scan(r, x1, y1, x2, y2), `n=${n} query ${k}`);
    }
  }
});

test("a query visits about what it finds, not the whole graph", () => {
  // A 20,000-node chain, 40 wide, 66 apart: a viewport of 900 model units holds ~14 of them.
  const n = 20000;
  const r = { x1: new Float64Array(n), y1: new Float64Array(n), x2: new Float64Array(n), y2: new Float64Array(n) };
  for (let i = 0; i < n; i++) [r.x1[i], r.x2[i], r.y1[i], r.y2[i]] = [-24, 24, i * 66, i * 66 + 30];
  const grid = new GridIndex(r);
  let visited = 0;
  grid.each(-500, 500_000, 500, 500_900, () => {
    visited++;
  });
  assert.ok(visited >= 13 && visited <= 15, `visited ${visited}`);
  assert.equal(grid.within(-500, 0, 500, n * 66, 100), null, "past the limit: null, not a partial list");
});

test("each() stops when the visitor says so", () => {
  const grid = new GridIndex(rects(500, 1000, 1000, 7));
  let seen = 0;
  const complete = grid.each(-1e9, -1e9, 1e9, 1e9, () => ++seen < 10);
  assert.equal(complete, false);
  assert.equal(seen, 10);
});

test("viewport extent and styles", () => {
  assert.deepEqual(extent({ zoom: 0.5, pan: { x: 100, y: -50 }, width: 800, height: 600 }), { x1: -200, y1: 100, x2: 1400, y2: 1300 });
  assert.equal(styleOf("leaf"), STYLE.leaf);
  assert.equal(styleOf("expanded"), STYLE.open);
  assert.equal(styleOf("folded"), STYLE.box);
  assert.equal(styleOf("op"), STYLE.node);
});
