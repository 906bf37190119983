"""One palette for the Bokeh charts, light and dark, and a page-side switch that follows JupyterLab's theme.

Bokeh themes (``bokeh.themes.Theme``) are applied in Python when a document is serialized, so they
cannot follow a theme switch in the page. Instead every themed property is listed once here with its
light and dark value. :func:`follow_page_theme` styles the models light in Python and returns a
``DocumentReady`` callback (``as_widget`` attaches it to the document) that, in the page, reads
JupyterLab's ``data-jp-theme-light`` on ``<body>`` (VS Code's ``vscode-dark`` class too), applies the
matching values, and re-applies them from a ``MutationObserver`` whenever the user switches theme.
"""

from __future__ import annotations

from typing import Any

from bokeh.models import Axis, ContinuousColorMapper, CustomJS, Grid, Plot
from bokeh.models.annotations import ColorBar, Legend, Title
from bokeh.palettes import Viridis256

__all__ = ["THEMES", "follow_page_theme", "styles_of"]

# The only place chart colours for chrome (not data) live. Light values match Bokeh's defaults closely;
# dark ones match JupyterLab's dark theme (--jp-layout-color0 #111111, --jp-ui-font-color1 ~#e0e0e0).
# "sequential" is the heatmaps' palette: more is darker on white, brighter on black.
THEMES: dict[str, dict[str, Any]] = {
    "light": {"background": "#ffffff", "frame": "#ffffff", "text": "#212121", "muted": "#555555",
              "grid": "#e6e6e6", "axis": "#8a8a8a", "outline": "#d0d0d0", "select": "#000000",
              "empty": "#e8e8e8", "mark": "#333333", "sequential": list(Viridis256[::-1][30:])},
    "dark": {"background": "#111111", "frame": "#181818", "text": "#e0e0e0", "muted": "#b8b8b8",
             "grid": "#2e2e2e", "axis": "#8a8a8a", "outline": "#3a3a3a", "select": "#ffffff",
             "empty": "#333333", "mark": "#e8e8e8", "sequential": list(Viridis256[70:])},
}

# Which property of which model type takes which palette entry.
_ROLES: list[tuple[type, dict[str, str]]] = [
    (Plot, {"background_fill_color": "frame", "border_fill_color": "background", "outline_line_color": "outline"}),
    (Title, {"text_color": "text"}),
    (Axis, {"axis_line_color": "axis", "major_tick_line_color": "axis", "minor_tick_line_color": "axis",
            "major_label_text_color": "muted", "axis_label_text_color": "text"}),
    (Grid, {"grid_line_color": "grid"}),
    (Legend, {"background_fill_color": "background", "border_line_color": "outline", "label_text_color": "text",
              "title_text_color": "text", "inactive_fill_color": "background"}),
    (ContinuousColorMapper, {"palette": "sequential"}),
    (ColorBar, {"background_fill_color": "background", "major_label_text_color": "muted",
                "title_text_color": "text", "major_tick_line_color": "axis", "bar_line_color": "outline"}),
]

_APPLY_JS = """
const isDark = () => document.body.dataset.jpThemeLight === 'false'
    || document.body.classList.contains('vscode-dark') || document.body.classList.contains('vscode-high-contrast');
let last = null;
let observer = null;
// Once the charts' notebook is closed their views are gone: setting properties then would send changes
// over a closed comm ("Cannot send"). The follower stops as soon as no view of these models is on the page.
const onPage = () => {
    const index = window.Bokeh && window.Bokeh.index;
    if (!index || typeof index.find_one !== 'function') return true;  // no view registry: cannot tell
    for (const m of models) {
        const v = index.find_one(m);
        if (v && v.el) return v.el.isConnected;
    }
    return false;
};
const apply = () => {
    if (last !== null && !onPage()) {
        if (observer) observer.disconnect();
        return;
    }
    const k = isDark() ? 1 : 0;
    if (k === last) return;  // the observer also fires for unrelated class changes
    last = k;
    for (let i = 0; i < models.length; i++) {
        const s = styles[i];
        for (const [prop, pair] of (s instanceof Map ? s.entries() : Object.entries(s))) models[i][prop] = pair[k];
    }
};
apply();
observer = new MutationObserver(apply);
observer.observe(document.body, {attributes: true, attributeFilter: ['data-jp-theme-light', 'class']});
"""


def styles_of(model: Any, theme: str) -> dict[str, Any]:
    """The themed property values of ``model`` in ``theme`` (empty for a model no role covers)."""
    return {prop: THEMES[theme][entry] for cls, props in _ROLES if isinstance(model, cls)
            for prop, entry in props.items()}


def follow_page_theme(root: Any) -> CustomJS:
    """Style every plot, title, axis, grid, legend and colour bar under ``root`` light now; return the
    ``DocumentReady`` callback that makes them follow the page's theme live (attach it to the document)."""
    models: list[Any] = []
    pairs: list[dict[str, list[Any]]] = []
    for cls, _ in _ROLES:
        for model in root.select({"type": cls}):
            if any(model is m for m in models):
                continue
            light, dark = styles_of(model, "light"), styles_of(model, "dark")
            for prop, value in light.items():
                setattr(model, prop, value)
            models.append(model)
            pairs.append({prop: [light[prop], dark[prop]] for prop in light})
    return CustomJS(args={"models": models, "styles": pairs}, code=_APPLY_JS)
