"""The web dashboard: `forkq web`, or `make_app(config_path)` mounted in a Django or Flask
site (the `forkq[web]` extra: Jinja2, Werkzeug, waitress). The daemon never imports it."""

from __future__ import annotations

from supervisor.web.app import Dashboard, make_app, make_app_from_config
from supervisor.web.server import serve

__all__ = ["Dashboard", "make_app", "make_app_from_config", "serve"]
