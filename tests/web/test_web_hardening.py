"""Dashboard requests that used to answer 500 or send the browser elsewhere (issue 22,
items 7 to 10), against a real `forkq web` on both backends."""

from __future__ import annotations

from http.cookies import SimpleCookie

import pytest
from webutil import TOKEN, ServerFactory, WebServer, csrf_of

# --- the redirect after login (issue 22.7) ------------------------------------------------------


def login_redirect(server: WebServer, target: str) -> tuple[int, str, str]:
    """Log in with the form, `next` = target: (status, Location, body)."""
    code, page, headers = server.request("/login")
    assert code == 200, page
    cookie = SimpleCookie(headers["Set-Cookie"])["forkq_session"].value
    form = {"csrf": csrf_of(page), "token": TOKEN, "next": target}
    code, body, headers = server.request(
        "/login", data=form, headers={"Cookie": f"forkq_session={cookie}"}
    )
    return code, headers.get("Location") or "", body


HOSTILE_NEXT = [
    "/\t/evil.example/",  # ?next=/%09/evil.example/: the URL standard drops the tab
    "/\n/evil.example/",
    "/\r/evil.example/",
    "\t//evil.example/",
    "/\\evil.example/",
    "\\\\evil.example/",
    "//evil.example/",
    "///evil.example/",
    "https://evil.example/",
    "javascript:alert(1)",
    " //evil.example/",
    "/jobs\r\nSet-Cookie: forkq_session=x",
    "/jobs\x00",
    "/\x7f/evil.example/",
]


@pytest.mark.parametrize("target", HOSTILE_NEXT)
def test_login_never_redirects_off_the_site(web_server: ServerFactory, target: str) -> None:
    server = web_server(token=TOKEN)
    code, location, body = login_redirect(server, target)
    assert code == 303, body
    assert location in ("/", server.url + "/"), location


def test_login_redirects_to_a_local_path(web_server: ServerFactory) -> None:
    server = web_server(token=TOKEN)
    code, location, _ = login_redirect(server, "/jobs?queue=email")
    assert code == 303 and location.endswith("/jobs?queue=email"), location
