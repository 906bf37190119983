// Colours and font from JupyterLab's CSS variables (VS Code's as a second choice), read at render
// time because Cytoscape draws on a canvas and needs concrete colours, not var(...) references.

export interface Theme {
  background: string;
  panel: string;
  panelAlt: string;
  text: string;
  textMuted: string;
  brand: string;
  border: string;
  leafFill: string;
  boxFill: string;
  expandedFill: string;
  edge: string;
  /** What-if: lost gradients and cuts (red), frozen leaves (blue-grey), ghosts (grey). */
  danger: string;
  dangerFill: string;
  frozen: string;
  frozenFill: string;
  ghost: string;
  fontFamily: string;
  dark: boolean;
}

export type Rgb = [number, number, number];

/** Resolve any CSS colour (names, var() results, rgba) to rgb through the browser itself. */
function parseColor(probe: HTMLElement, value: string): { rgb: Rgb; alpha: number } | null {
  if (!value) return null;
  probe.style.color = "";
  probe.style.color = value;
  if (!probe.style.color) return null;
  const m = getComputedStyle(probe).color.match(/rgba?\(([^)]+)\)/);
  if (!m) return null;
  const parts = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
  return { rgb: [parts[0], parts[1], parts[2]], alpha: parts.length > 3 ? parts[3] : 1 };
}

/** "#rrggbb" -> rgb, with no help from the browser (works while the element is detached). */
function parseHex(value: string): Rgb {
  const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(value);
  return m ? [parseInt(m[1], 16), parseInt(m[2], 16), parseInt(m[3], 16)] : [128, 128, 128];
}

const hex = ([r, g, b]: Rgb): string =>
  "#" + [r, g, b].map((v) => Math.round(Math.max(0, Math.min(255, v))).toString(16).padStart(2, "0")).join("");

const mix = (a: Rgb, b: Rgb, t: number): Rgb => [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t];

const luminance = ([r, g, b]: Rgb): number => (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;

export function readTheme(el: HTMLElement): Theme {
  const css = getComputedStyle(el);
  const probe = document.createElement("span");
  probe.style.display = "none";
  el.appendChild(probe);
  try {
    const pick = (names: string[], fallback: string, over?: Rgb): Rgb => {
      for (const name of names) {
        const c = parseColor(probe, css.getPropertyValue(name).trim());
        // Translucent theme colours (JupyterLab's text is rgba) are flattened onto the background.
        if (c) return over && c.alpha < 1 ? mix(over, c.rgb, c.alpha) : c.rgb;
      }
      // A widget rendered into a container that is not on the page yet (an ipywidgets HBox) has no
      // computed styles at all: fall back to the literal hex colour.
      return parseColor(probe, fallback)?.rgb ?? parseHex(fallback);
    };
    const bg = pick(["--jp-layout-color0", "--vscode-editor-background"], "#ffffff");
    const dark = luminance(bg) < 0.5;
    const panel = pick(["--jp-layout-color1"], dark ? "#1e1e1e" : "#ffffff", bg);
    const panelAlt = pick(["--jp-layout-color2"], dark ? "#2d2d2d" : "#eeeeee", bg);
    const text = pick(["--jp-ui-font-color0", "--vscode-editor-foreground"], dark ? "#ffffff" : "#000000", bg);
    const textMuted = pick(["--jp-ui-font-color1"], dark ? "#c8c8c8" : "#333333", bg);
    const brand = pick(["--jp-brand-color1", "--vscode-focusBorder"], dark ? "#4a9de6" : "#1976d2", bg);
    const border = pick(["--jp-border-color1"], dark ? "#616161" : "#bdbdbd", bg);
    const danger = pick(["--jp-error-color1", "--vscode-errorForeground"], dark ? "#ef5350" : "#d32f2f", bg);
    const frozen = dark ? ([144, 164, 174] as Rgb) : ([84, 110, 122] as Rgb); // Material blue-grey
    const font = css.getPropertyValue("--jp-ui-font-family").trim() || css.getPropertyValue("--vscode-font-family").trim();
    return {
      background: hex(bg),
      panel: hex(panel),
      panelAlt: hex(panelAlt),
      text: hex(text),
      textMuted: hex(textMuted),
      brand: hex(brand),
      border: hex(border),
      leafFill: hex(mix(bg, brand, dark ? 0.28 : 0.14)),
      boxFill: hex(mix(panelAlt, brand, dark ? 0.1 : 0.06)),
      expandedFill: hex(mix(bg, text, dark ? 0.05 : 0.025)),
      edge: hex(mix(bg, textMuted, 0.55)),
      danger: hex(danger),
      dangerFill: hex(mix(bg, danger, dark ? 0.35 : 0.2)),
      frozen: hex(frozen),
      frozenFill: hex(mix(bg, frozen, dark ? 0.35 : 0.22)),
      ghost: hex(mix(bg, textMuted, 0.45)),
      fontFamily: canvasFont(font || 'system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif'),
      dark,
    };
  } finally {
    probe.remove();
  }
}

/** `colour` ("#rrggbb" or rgb) laid over the theme's background at `amount` (0: background, 1: colour):
 *  the fills features derive from their hues. */
export function tint(t: Theme, colour: string | Rgb, amount: number): string {
  return hex(mix(parseHex(t.background), typeof colour === "string" ? parseHex(colour) : colour, amount));
}

/** A font-family list Cytoscape accepts. Its style parser allows only word characters, hyphens, spaces,
 *  double quotes and commas: JupyterLab's `--jp-ui-font-family` quotes names with single quotes
 *  ('Segoe UI'), which Cytoscape rejected, drawing labels in its default font while node sizes were
 *  measured in the theme's: wider text than box, clipped labels. */
export function canvasFont(family: string): string {
  const cleaned = family
    .replace(/'/g, '"')
    .replace(/[^\w\- ",]/g, "")
    .split(",")
    .map((f) => f.trim())
    .filter((f) => f && f !== '""')
    .join(", ");
  return cleaned || "sans-serif";
}

/** WCAG relative luminance of "#rrggbb". */
function relLum(c: string): number {
  const lin = (v: number): number => {
    const x = v / 255;
    return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4;
  };
  const [r, g, b] = parseHex(c);
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}

/** WCAG contrast ratio of two "#rrggbb" colours (1 to 21). */
export function contrast(a: string, b: string): number {
  const [x, y] = [relLum(a), relLum(b)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}

/** `fg`, moved toward white (on a dark `bg`) or black (on a light one) just enough for `min`:1 contrast
 *  (WCAG AA is 4.5): a hue stays recognisable (red stays red) and the text stays readable. */
export function readable(fg: string, bg: string, min = 4.5): string {
  const towards: Rgb = relLum(bg) < 0.2 ? [255, 255, 255] : [0, 0, 0];
  for (let t = 0; t <= 1.0001; t += 0.05) {
    const c = hex(mix(parseHex(fg), towards, t));
    if (contrast(c, bg) >= min) return c;
  }
  return hex(towards);
}
