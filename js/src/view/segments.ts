// ELK routes to Cytoscape `segments` edges (pure math, unit-tested in node).
import type { Point } from "./elkgraph";

/** ELK's orthogonal route as Cytoscape `segments` data: endpoints relative to the node centres,
 *  bend points as (weight, distance) along / across the line between the two endpoints. */
export function toSegments(route: Point[], source: Point, target: Point): Record<string, unknown> | null {
  if (route.length < 2) return null;
  const start = route[0];
  const end = route[route.length - 1];
  const rel = (p: Point, c: Point): string => `${(p.x - c.x).toFixed(1)}px ${(p.y - c.y).toFixed(1)}px`;
  if (route.length === 2) return { sep: rel(start, source), tep: rel(end, target) };
  const dx = end.x - start.x;
  const dy = end.y - start.y;
  const len2 = dx * dx + dy * dy;
  if (len2 < 1e-6) return null;
  const len = Math.sqrt(len2);
  const ws: number[] = [];
  const ds: number[] = [];
  for (const p of route.slice(1, -1)) {
    const px = p.x - start.x;
    const py = p.y - start.y;
    ws.push((px * dx + py * dy) / len2);
    ds.push((px * -dy + py * dx) / len);
  }
  return { ws, ds, sep: rel(start, source), tep: rel(end, target) };
}
