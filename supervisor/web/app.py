"""The dashboard as a WSGI application: routing, the security gate, rendering.

`make_app(config_path)` is what a Django or Flask site mounts; `forkq web` serves the
same object with waitress (server.py). Pages (pages.py) and actions (actions.py) are
plain functions of a `Context`; everything they show goes through Jinja2 with
autoescaping on, so no row of the database can add markup to a page.

Each serving thread has its own store (one database connection), opened on first use.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, MapAdapter, RequestRedirect, Rule
from werkzeug.utils import send_from_directory
from werkzeug.wrappers import Request, Response

from supervisor import events, logs
from supervisor.config import HOME_DATABASE, Config, load_config
from supervisor.errors import DatabaseError, ForkqError, SchemaError
from supervisor.escaping import for_page
from supervisor.jobref import JobRef
from supervisor.status import STATUS_CAP
from supervisor.store import Store
from supervisor.web import filters
from supervisor.web.context import MAX_JOB_ID, Context, DashboardRequest
from supervisor.web.databases import Databases, JobRefConverter
from supervisor.web.security import (
    HEADERS,
    SESSION_COOKIE,
    SESSION_LIFETIME,
    TOKEN_ENV,
    Guard,
)
from supervisor.work.command import load_producer_handlers

HERE = Path(__file__).parent
STATIC = HERE / "static"
JOB = "/jobs/<jobref:job_id>"  # 42 or reports:42; a larger id is no job: 404, never 500
BATCH = f"/batches/<int(max={MAX_JOB_ID}):batch_id>"

Handler = Callable[..., Response]


class Dashboard:
    """The WSGI callable."""

    def __init__(self, config: Config, *, read_only: bool, token: str | None) -> None:
        from supervisor.web.actions import ACTIONS  # they import Context from here
        from supervisor.web.pages import PAGES

        self.config = config
        self.read_only = read_only
        self.guard = Guard(token)
        self.handlers: dict[str, Handler] = {**PAGES, **ACTIONS}
        self.actions = set(ACTIONS)
        self.urls = Map(
            [*_page_rules(), *_action_rules()],
            strict_slashes=False,
            converters={"jobref": JobRefConverter},
        )
        self.databases = Databases(config)
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            finalize=_shown,  # every {{ }}: text from rows shows its control characters
        )
        filters.install(self.templates)
        self.log = logs.get(component="web")

    def store(self, database: str = HOME_DATABASE) -> Store:
        """This serving thread's store of `database` (one connection, opened on first use)."""
        return self.databases.store(database)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = DashboardRequest(environ)
        response = self.respond(request)
        return response(environ, start_response)

    def respond(self, request: DashboardRequest) -> Response:
        if not self.guard.host_allowed(request.host):
            # Without a token only loopback names are served (see security.py: DNS rebinding),
            # and nothing else is answered first: not a redirect to that host (`//jobs`).
            refused = _refused(request, 403, "Forbidden: not a loopback host name")
            return _secured(refused, cache=False)
        urls = self.urls.bind_to_environ(request.environ)
        try:
            endpoint, args = urls.match()
        except RequestRedirect as exc:
            return _secured(exc.get_response(request.environ), cache=False)
        except (NotFound, MethodNotAllowed) as exc:
            return _secured(self._no_page(request, urls, exc), cache=False)
        if endpoint == "static":
            return _static(request, args["filename"])
        context, refusal = self._gate(request, urls, endpoint)
        response = refusal or self._run(context, endpoint, args)
        for name, value, age in context.cookies:
            _cookie(response, request, name, value, age)
        return _secured(response, cache=False)

    def _gate(
        self, request: DashboardRequest, urls: MapAdapter, endpoint: str
    ) -> tuple[Context, Response | None]:
        """The context, and a refusal when the request may not go on."""
        bearer = self.guard.bearer(request.headers.get("Authorization"))
        session = self.guard.decode(request.cookies.get(SESSION_COOKIE)) or self.guard.new_session()
        context = Context(self, request, urls, session, bearer is True)
        if session.fresh and bearer is None:
            context.cookies.append((SESSION_COOKIE, self.guard.encode(session), SESSION_LIFETIME))
        authenticated = bearer is True or (bearer is None and session.authenticated)
        if endpoint == "login":
            return context, None
        if not authenticated:
            return context, self._unauthorized(context, endpoint)
        if request.method == "POST" and endpoint in self.actions and endpoint != "logout":
            if self.read_only:
                return context, _plain(403, "Forbidden: the dashboard is read-only")
            if not context.bearer and not self.guard.csrf_ok(session, request.form.get("csrf")):
                self.log.warning(
                    events.WEB_CSRF_REFUSED, endpoint=endpoint, client=request.remote_addr
                )
                return context, _plain(403, "Forbidden: missing or wrong CSRF token")
        if endpoint == "logout" and not self.guard.csrf_ok(session, request.form.get("csrf")):
            return context, _plain(403, "Forbidden: missing or wrong CSRF token")
        return context, None

    def _no_page(self, request: DashboardRequest, urls: MapAdapter, exc: HTTPException) -> Response:
        """An address no page has (`/jobs/abc`): the error page for a signed-in browser on
        a host served; in plain text (JSON under /api/), and nothing more, to anyone else."""
        status = exc.code or 404
        if (
            request.method == "GET"
            and not _is_api(request)
            and self.guard.host_allowed(request.host)
        ):
            context, refusal = self._gate(request, urls, "no_page")
            if refusal is None:
                return context.render(
                    "error.html", status=status, message=f"{exc.name}: no page at {request.path}"
                )
        return _refused(request, status, exc.name)

    def _unauthorized(self, context: Context, endpoint: str) -> Response:
        if endpoint.startswith("api_") or context.request.method != "GET":
            response = context.json({"error": "authentication required"}, 401)
        else:
            response = context.render(
                "login.html", status=401, error=None, next=context.request.full_path
            )
        response.headers["WWW-Authenticate"] = 'Bearer realm="forkq"'
        return response

    def _run(self, context: Context, endpoint: str, args: Mapping[str, Any]) -> Response:
        args = dict(args)
        ref = args.get("job_id")
        if isinstance(ref, JobRef):  # /jobs/reports:42: the page and its actions are reports'
            if ref.database not in self.databases.names:
                return _plain(404, f"Not Found: no database {ref.database}")
            context.db, args["job_id"] = ref.database, ref.id
        try:
            if not isinstance(ref, JobRef):
                context.db = context.chosen_database()
            # /api/status without ?db= reads every database itself and names those down.
            every = endpoint == "api_status" and "db" not in context.request.args
            asks = self.databases.several and endpoint not in ("login", "logout") and not every
            down = self.databases.known_down(context.db) if asks else None
            if down is not None:
                return self._down(context, down)
            return self.handlers[endpoint](context, **args)
        except HTTPException as exc:  # a bad id or ?before=, a database not in the config
            if _is_api(context.request) or context.request.method != "GET":
                return _refused(context.request, exc.code or 400, exc.description or exc.name)
            message = f"{exc.name}: {exc.description or ''}".rstrip(": ")
            return context.render("error.html", status=exc.code or 400, message=message)
        except (DatabaseError, SchemaError) as exc:
            self.log.error(events.WEB_DATABASE_ERROR, endpoint=endpoint, error=str(exc))
            if self.databases.several:
                why = self.databases.why(context.db, exc)
                self.databases.failed(context.db, why)
                return self._down(context, why)
            if _is_api(context.request):
                return self._down(context, self.databases.why(context.db, exc))
            return context.render("error.html", status=503, message=str(exc))
        except ForkqError as exc:
            if _is_api(context.request):
                return context.json({"error": str(exc)}, 400)
            return context.render("error.html", status=400, message=str(exc))

    def _down(self, context: Context, why: str) -> Response:
        """503: the page's database does not answer; the others summed up, as the overview.
        Under /api/ JSON naming it as `forkq status --json` does (its URL without password)."""
        message = f"database {context.db} does not answer: {why}"
        if _is_api(context.request):
            url = self.databases.config_of(context.db).database.redacted()
            body = {"error": message, "name": context.db, "reachable": False, "database": url}
            return context.json(body, 503)
        summary = self.databases.summary(STATUS_CAP)
        return context.render("error.html", status=503, message=message, every_database=summary)


def _page_rules() -> list[Rule]:
    get = ["GET"]
    return [
        Rule("/", endpoint="overview", methods=get),
        Rule("/jobs", endpoint="jobs", methods=get),
        Rule(JOB, endpoint="job", methods=get),
        Rule(BATCH, endpoint="batch", methods=get),
        Rule("/dead", endpoint="dead", methods=get),
        Rule("/running", endpoint="running", methods=get),
        Rule("/queues", endpoint="queues", methods=get),
        Rule("/processes", endpoint="processes", methods=get),
        Rule("/schedules", endpoint="schedules", methods=get),
        Rule("/alerts", endpoint="alerts", methods=get),
        Rule("/handlers", endpoint="handlers", methods=get),
        Rule("/locks", endpoint="locks", methods=get),
        Rule("/api/status", endpoint="api_status", methods=get),
        Rule("/login", endpoint="login", methods=["GET", "POST"]),
        Rule("/static/<path:filename>", endpoint="static", methods=get),
    ]


def _action_rules() -> list[Rule]:
    post = ["POST"]
    return [
        Rule(JOB + "/retry", endpoint="job_retry", methods=post),
        Rule(JOB + "/discard", endpoint="job_discard", methods=post),
        Rule(JOB + "/cancel", endpoint="job_cancel", methods=post),
        Rule("/dead/retry", endpoint="dead_retry", methods=post),
        Rule("/dead/discard", endpoint="dead_discard", methods=post),
        Rule("/running/cancel", endpoint="running_cancel", methods=post),
        Rule("/queues/pause", endpoint="queue_pause", methods=post),
        Rule("/queues/resume", endpoint="queue_resume", methods=post),
        Rule("/schedules/run", endpoint="schedule_run", methods=post),
        Rule("/jobs/bulk", endpoint="jobs_bulk", methods=post),
        Rule("/schedules/add", endpoint="schedule_add", methods=post),
        Rule("/schedules/pause", endpoint="schedule_pause", methods=post),
        Rule("/schedules/resume", endpoint="schedule_resume", methods=post),
        Rule("/schedules/remove", endpoint="schedule_remove", methods=post),
        Rule("/logout", endpoint="logout", methods=post),
    ]


def _static(request: Request, filename: str) -> Response:
    """A file of static/; 404 for anything else: a missing file, and every name that leaves
    the folder or that the filesystem refuses (`..`, backslashes, NUL), never a traceback."""
    try:
        return _secured(send_from_directory(STATIC, filename, request.environ), cache=True)
    except (HTTPException, ValueError, OSError):
        return _secured(_plain(404, "Not Found"), cache=False)


def _plain(status: int, text: str) -> Response:
    return Response(f"{status} {text}\n", status=status, mimetype="text/plain")


def _is_api(request: Request) -> bool:
    """An API request (`/api/...`): a program reads the answer, errors included."""
    return request.path == "/api" or request.path.startswith("/api/")


def _refused(request: Request, status: int, text: str) -> Response:
    """A refusal in plain text, or in JSON ({"error": ...}) under /api/."""
    if _is_api(request):
        body = json.dumps({"error": text}, indent=2)
        return Response(body, status=status, mimetype="application/json")
    return _plain(status, text)


def _secured(response: Response, cache: bool) -> Response:
    """Every response: the security headers; pages and API answers are never stored."""
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    response.headers["Cache-Control"] = "private, max-age=3600" if cache else "no-store"
    return response


def _cookie(response: Response, request: Request, name: str, value: str, age: int) -> None:
    """HttpOnly, SameSite=Strict, scoped to where the app is mounted; Secure behind https."""
    secure = request.scheme == "https" or request.headers.get("X-Forwarded-Proto") == "https"
    response.set_cookie(
        name,
        value,
        max_age=age,
        path=request.script_root or "/",
        secure=secure,
        httponly=True,
        samesite="Strict",
    )


def make_app_from_config(
    config: Config, *, read_only: bool | None = None, token: str | None = None
) -> Dashboard:
    """The dashboard for a loaded config. `read_only` None takes `[web] read_only`; `token`
    None means no token (tests and callers pass it; make_app reads FORKQ_WEB_TOKEN)."""
    load_producer_handlers(config)
    return Dashboard(
        config, read_only=config.web.read_only if read_only is None else read_only, token=token
    )


def make_app(config_path: str | os.PathLike[str] | None = None) -> Dashboard:
    """The WSGI app to mount in Django or Flask: the config file (FORKQ_DATABASE_URL still
    wins for the URL), the token from FORKQ_WEB_TOKEN, `[web] read_only`."""
    config = load_config(config_path or os.environ.get("FORKQ_CONFIG") or None)
    return make_app_from_config(config, token=os.environ.get(TOKEN_ENV) or None)


def _shown(value: Any) -> Any:
    """What a template prints, control characters and bidi marks as escapes (for_page);
    markup a filter made stays markup."""
    if isinstance(value, Markup):
        return Markup(for_page(str(value)))  # noqa: S704  (adds only backslash escapes)
    return for_page(value) if isinstance(value, str) else value
