"""What a page or an action gets (Context), apart from the app that builds it, so pages
and actions import this module and never app.py (which imports them)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from werkzeug.exceptions import NotFound
from werkzeug.routing import MapAdapter
from werkzeug.utils import redirect
from werkzeug.wrappers import Request, Response

from supervisor.config import HOME_DATABASE, Config
from supervisor.jobref import JobRef, format_job_ref, parse_job_ref
from supervisor.store import Store
from supervisor.web.security import FLASH_COOKIE, Session, local_target

if TYPE_CHECKING:
    from supervisor.web.app import Dashboard

MAX_BODY = 1 << 20  # bytes a POST may carry (a form of ids)
MAX_JOB_ID = 2**63 - 1  # forkq_jobs.id is a signed 64-bit integer in both databases


def job_id_of(text: str) -> int | None:
    """`text` as a job id (ASCII digits, 1 to 2^63 - 1), None if it cannot be one: SQLite
    raises OverflowError for a bound integer past 64 bits."""
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    value = int(text)
    return value if 0 < value <= MAX_JOB_ID else None


def job_ref_of(text: str) -> JobRef | None:
    """`42` (the home database) or `reports:42`, None if it cannot be a job."""
    try:
        return parse_job_ref(text)
    except ValueError:
        return None


class DashboardRequest(Request):
    max_content_length = MAX_BODY
    max_form_memory_size = MAX_BODY


@dataclass
class Context:
    """What a page or an action gets: the request, its session, the store, the config."""

    app: Dashboard
    request: DashboardRequest
    urls: MapAdapter
    session: Session
    bearer: bool  # authenticated by the Authorization header (an API client)
    cookies: list[tuple[str, str, int]] = field(default_factory=list)  # to set: name, value, age
    db: str = HOME_DATABASE  # the database this page shows and its actions change
    read: bool = False  # this page read its database (so it answers, when the page renders)

    def chosen_database(self) -> str:
        """`db` of the query string (or a form's field), the home database without one."""
        name = self.request.args.get("db") or self.request.form.get("db") or HOME_DATABASE
        if name not in self.app.databases.names:
            raise NotFound(f"no database {name[:64]!r} in the config")
        return name

    @property
    def config(self) -> Config:
        """The config of this page's database (queues, pools, schedules of it alone)."""
        return self.app.databases.config_of(self.db)

    @property
    def store(self) -> Store:
        self.read = True
        return self.app.store(self.db)

    @property
    def read_only(self) -> bool:
        return self.app.read_only

    def url(self, endpoint: str, **values: Any) -> str:
        """The URL of `endpoint`; on another database's page it stays on that database
        (`?db=NAME`, a job as NAME:ID) unless `db` is given (None: the home one)."""
        if self.db != HOME_DATABASE and endpoint not in ("static", "login", "logout"):
            if isinstance(values.get("job_id"), int):
                values["job_id"] = JobRef(self.db, values["job_id"])
            elif endpoint != "job":
                values.setdefault("db", self.db)
        if values.get("db") == HOME_DATABASE:
            values["db"] = None
        return self.urls.build(endpoint, {k: v for k, v in values.items() if v is not None})

    def render(self, template: str, status: int = 200, **values: Any) -> Response:
        values.setdefault("nav", "")
        flash = self.app.guard.read_flash(self.request.cookies.get(FLASH_COOKIE))
        if flash is not None:
            self.cookies.append((FLASH_COOKIE, "", 0))
        if self.read and status < 500:
            self.app.databases.answered(self.db)
        # By its session or its Bearer header: the same menu and header either way.
        authenticated = self.session.authenticated or self.bearer
        page = self.app.templates.get_template(template).render(
            url=self.url,
            static=lambda name: self.url("static", filename=name),
            csrf=self.app.guard.csrf_token(self.session),
            read_only=self.read_only,
            login_required=self.app.guard.required,
            authenticated=authenticated,
            logged_in=self.session.authenticated,  # a session to log out of
            database=self.config.database.redacted(),
            db=self.db,
            ref=self.ref,
            databases=self.app.databases.names if self.app.databases.several else [],
            down=self.app.databases.down() if authenticated else {},
            # Queues a pool of the config works; None with no config file to say so.
            served={p.name for p in self.config.pools} if self.config.from_file else None,
            here=self.request.full_path.rstrip("?"),
            flash=flash,
            **values,
        )
        return Response(page, status=status, mimetype="text/html")

    def ref(self, job_id: int) -> str:
        """How a job of this page's database is named: 42 at home, reports:42 elsewhere."""
        return format_job_ref(self.db, job_id)

    def where(self) -> dict[str, str]:
        """The database an action changed, for its log line (ids repeat across databases)."""
        return {"database": self.db} if self.app.databases.several else {}

    def back(self, message: str, fallback: str = "overview", *, gone: bool = False) -> Response:
        """303 to the page the form came from (a local path only), with a message for it;
        to `fallback` when `gone`: that page was the job the action deleted."""
        local = None if gone else local_target(self.request.form.get("next", ""))
        target = self.url(fallback) if local is None else self.request.script_root + local
        self.cookies.append((FLASH_COOKIE, self.app.guard.sign_flash(message), 60))
        return redirect(target, code=303)

    def json(self, document: Any, status: int = 200) -> Response:
        return Response(json.dumps(document, indent=2), status=status, mimetype="application/json")

    def who(self) -> str:
        """Who acts, for last_error: the dashboard and the client's address."""
        return f"the dashboard ({self.request.remote_addr or 'unknown address'})"
