// The drawn graph as one SVG document, from what Cytoscape laid out and styled: open module boxes
// (outermost first), then edges (polylines along their routes, arrowheads as markers), then nodes;
// labels as <text> with every character escaped (names are user input). The one SVG writer:
// the toolbar's "SVG" button and Python's save_svg (through headless Chromium) both use it.
import type { Core, EdgeSingular, NodeSingular } from "cytoscape";
import { LINE_HEIGHT } from "./style";

/** Text for XML: markup characters escaped, characters XML 1.0 forbids dropped. */
export function xmlEscape(s: string): string {
  return s
    .replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g, "")
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&apos;");
}

const f = (x: number): string => (Math.round(x * 10) / 10).toString();
const num = (v: unknown): number => parseFloat(String(v)) || 0;
const attr = (v: string): string => `"${xmlEscape(v)}"`;

interface Pt {
  x: number;
  y: number;
}

function textBlock(ele: NodeSingular | EdgeSingular, cx: number, firstBaseline: number, lines: string[]): string {
  const size = num(ele.style("font-size")) || 11;
  const weight = ele.style("font-weight") === "bold" ? ' font-weight="bold"' : "";
  const italic = ele.style("font-style") === "italic" ? ' font-style="italic"' : "";
  const spans = lines
    .map((line, i) => `<tspan x="${f(cx)}" y="${f(firstBaseline + i * LINE_HEIGHT)}">${xmlEscape(line)}</tspan>`)
    .join("");
  return `<text font-size="${f(size)}" text-anchor="middle" fill=${attr(ele.style("color"))}${weight}${italic}>${spans}</text>`;
}

function nodeSvg(n: NodeSingular, isBox: boolean): string {
  const bb = n.boundingBox({ includeLabels: false, includeOverlays: false } as never);
  const bw = num(n.style("border-width"));
  const style = n.style("border-style");
  const dash = style === "dashed" ? ` stroke-dasharray="${f(bw * 2.5 + 2)} ${f(bw * 2 + 2)}"` : style === "dotted" ? ` stroke-dasharray="1 ${f(bw + 1)}"` : "";
  const rx = String(n.style("shape")).includes("round") ? 5 : 0;
  // The bounding box includes the border; the rectangle's stroke is centred on its edge.
  const x = bb.x1 + bw / 2;
  const y = bb.y1 + bw / 2;
  const w = Math.max(0, bb.w - bw);
  const h = Math.max(0, bb.h - bw);
  const rect =
    `<rect x="${f(x)}" y="${f(y)}" width="${f(w)}" height="${f(h)}" rx="${rx}" fill=${attr(n.style("background-color"))} ` +
    `fill-opacity="${f(num(n.style("background-opacity")))}" stroke=${attr(n.style("border-color"))} ` +
    `stroke-opacity="${f(num(n.style("border-opacity")))}" stroke-width="${f(bw)}"${dash}/>`;
  const label = String(n.style("label") ?? "");
  let text = "";
  if (label) {
    const lines = label.split("\n");
    const size = num(n.style("font-size")) || 11;
    const cx = (bb.x1 + bb.x2) / 2;
    const first =
      isBox || n.style("text-valign") === "top"
        ? bb.y1 + num(n.style("text-margin-y")) - (lines.length - 1) * LINE_HEIGHT - 3
        : (bb.y1 + bb.y2) / 2 - ((lines.length - 1) * LINE_HEIGHT) / 2 + size * 0.35;
    text = textBlock(n, cx, first, lines);
  }
  return `<g id=${attr(n.id())} opacity="${f(num(n.style("opacity")))}">${rect}${text}</g>`;
}

function edgePoints(e: EdgeSingular): Pt[] {
  const bends = (e.segmentPoints() as Pt[] | undefined) ?? (e.controlPoints() as Pt[] | undefined) ?? [];
  return [e.sourceEndpoint(), ...bends, e.targetEndpoint()];
}

export function toSVG(cy: Core, background: string, fontFamily: string): string {
  const markers = new Map<string, string>();
  const marker = (shape: string, color: string, start: boolean): string => {
    if (!shape || shape === "none") return "";
    const key = `${shape}|${color}|${start ? "s" : "e"}`;
    let id = markers.get(key);
    if (!id) {
      id = `m${markers.size}`;
      markers.set(key, id);
    }
    return ` marker-${start ? "start" : "end"}="url(#${id})"`;
  };
  const nodes = (cy.nodes().toArray() as NodeSingular[]).filter((n) => n.visible());
  const isBox = (n: NodeSingular): boolean => n.data("kind") === "expanded";
  const depth = (n: NodeSingular): number => Number(n.data("z")) || 0;
  const boxes = nodes.filter(isBox).sort((a, b) => depth(a) - depth(b));
  const parts: string[] = [];
  boxes.forEach((n) => {
    parts.push(nodeSvg(n, true));
  });
  cy.edges()
    .filter((e) => e.visible())
    .forEach((e) => {
      const pts = edgePoints(e);
      const color = e.style("line-color");
      const width = Math.max(0.5, num(e.style("width")));
      const dashed = e.style("line-style") !== "solid" ? ` stroke-dasharray="${f(width * 3 + 2)} ${f(width * 2 + 2)}"` : "";
      const line =
        `<polyline points="${pts.map((p) => `${f(p.x)},${f(p.y)}`).join(" ")}" fill="none" stroke=${attr(color)} ` +
        `stroke-width="${f(width)}"${dashed}` +
        marker(e.style("target-arrow-shape"), e.style("target-arrow-color"), false) +
        marker(e.style("source-arrow-shape"), e.style("source-arrow-color"), true) +
        "/>";
      const label = String(e.style("label") ?? "");
      let text = "";
      if (label) {
        const mid = e.midpoint();
        text = textBlock(e, mid.x, mid.y + 3, label.split("\n"));
      }
      parts.push(`<g id=${attr(e.id())} opacity="${f(num(e.style("opacity")))}">${line}${text}</g>`);
    });
  nodes
    .filter((n) => !isBox(n))
    .forEach((n) => {
      parts.push(nodeSvg(n, false));
    });
  const defs = [...markers].map(([key, id]) => {
    const [shape, color, end] = key.split("|");
    const path = shape === "tee" ? "M 8 0 L 10 0 L 10 10 L 8 10 z" : "M 0 0 L 10 5 L 0 10 z";
    const orient = end === "s" ? "auto-start-reverse" : "auto";
    return `<marker id="${id}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="${orient}"><path d="${path}" fill=${attr(color)}/></marker>`;
  });
  const bb = cy.elements().filter((e) => e.visible()).boundingBox();
  const pad = 20;
  const x0 = (Number.isFinite(bb.x1) ? bb.x1 : 0) - pad;
  const y0 = (Number.isFinite(bb.y1) ? bb.y1 : 0) - pad;
  const w = (Number.isFinite(bb.w) ? bb.w : 0) + 2 * pad;
  const h = (Number.isFinite(bb.h) ? bb.h : 0) + 2 * pad;
  return [
    `<?xml version="1.0" encoding="UTF-8"?>`,
    `<svg xmlns="http://www.w3.org/2000/svg" width="${f(w)}" height="${f(h)}" viewBox="${f(x0)} ${f(y0)} ${f(w)} ${f(h)}" font-family=${attr(fontFamily)}>`,
    `<defs>${defs.join("")}</defs>`,
    `<rect x="${f(x0)}" y="${f(y0)}" width="${f(w)}" height="${f(h)}" fill=${attr(background)}/>`,
    ...parts,
    "</svg>",
    "",
  ].join("\n");
}
