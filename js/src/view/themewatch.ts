// Follow the notebook's theme live: JupyterLab and Notebook 7 set `data-jp-theme-name` /
// `data-jp-theme-light` on <body> when the user switches theme, VS Code changes <body>'s class, and a
// browser may flip prefers-color-scheme. The canvas draws with concrete colours, so on any of these the
// theme is read again (twice: the new theme's CSS may land a moment after the attribute changes).
import { readTheme, type Theme } from "./theme";

const signature = (t: Theme): string => `${t.background}|${t.text}|${t.panel}|${t.brand}|${t.fontFamily}`;

/** Calls `onChange` with the new theme whenever the colours `el` sees change; returns the stop function. */
export function watchTheme(el: HTMLElement, initial: Theme, onChange: (t: Theme) => void): () => void {
  let last = signature(initial);
  const timers: ReturnType<typeof setTimeout>[] = [];
  const check = (): void => {
    if (!el.isConnected) return;
    const t = readTheme(el);
    const sig = signature(t);
    if (sig === last) return;
    last = sig;
    onChange(t);
  };
  const soon = (): void => {
    check();
    timers.push(setTimeout(check, 120), setTimeout(check, 600));
  };
  const observer = new MutationObserver(soon);
  observer.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-name", "data-jp-theme-light", "class", "style"] });
  const media = typeof matchMedia === "function" ? matchMedia("(prefers-color-scheme: dark)") : null;
  media?.addEventListener("change", soon);
  return () => {
    observer.disconnect();
    media?.removeEventListener("change", soon);
    for (const t of timers) clearTimeout(t);
  };
}
