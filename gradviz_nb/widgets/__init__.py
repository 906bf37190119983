"""Front ends: anywidget canvas, ipywidgets and Bokeh panels. Know the data model, not tracing."""
