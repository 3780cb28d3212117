"""Dashboard requests that used to answer 500 or send the browser elsewhere (issue 22,
items 7 to 10), against a real `forkq web` on both backends."""

from __future__ import annotations

import subprocess
from http.cookies import SimpleCookie
from pathlib import Path

import pytest
from util import python, subprocess_env
from webutil import TOKEN, ServerFactory, WebServer, csrf_of, write_config

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


# --- static paths (issue 22.10) -----------------------------------------------------------------

STATIC_REFUSED = [
    "/static/missing.css",
    "/static/missing/dashboard.css",
    "/static/..",
    "/static/../app.py",
    "/static/..%2fapp.py",
    "/static/%2e%2e/app.py",
    "/static/%2e%2e%2fapp.py",
    "/static/.%2e/app.py",
    "/static/%252e%252e%252fapp.py",
    "/static/..%5capp.py",
    "/static/..\\app.py",
    "/static/%2e%2e%5c%2e%2e%5cweb%5capp.py",
    "/static//etc/passwd",
    "/static/%2fetc%2fpasswd",
    "/static/....//app.py",
    "/static/./../app.py",
    "/static/%00",
    "/static/dashboard.css%00",
    "/static/dashboard.css%00.png",
    "/static/%c0%ae%c0%ae/app.py",
    "/static/C:%5cwindows%5cwin.ini",
    "/static/~/.bashrc",
    "/static/..;/app.py",
]


def raw_get(server: WebServer, path: str, follow: bool = True) -> tuple[int, str]:
    """GET `path` exactly as written (no client-side normalisation); a redirect within the
    site (`//` merged) is followed."""
    import http.client

    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        connection.endheaders()
        response = connection.getresponse()
        location = response.getheader("Location") or ""
        if follow and response.status in (301, 302, 307, 308):
            assert location.startswith(("/static/", server.url + "/static/")), location
            return raw_get(server, location.removeprefix(server.url), follow=False)
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()


def test_a_missing_or_refused_static_path_is_404_without_a_traceback(
    web_server: ServerFactory,
) -> None:
    server = web_server()
    assert raw_get(server, "/static/dashboard.css")[0] == 200
    answers = {path: raw_get(server, path) for path in STATIC_REFUSED}
    wrong = {path: code for path, (code, _) in answers.items() if code != 404}
    assert not wrong, wrong
    for path, (_, body) in answers.items():
        assert "Traceback" not in body and "import" not in body, path
    assert "Traceback" not in server.log.read_text()


# --- job ids past 64 bits (issue 22.9) ----------------------------------------------------------

TOO_LARGE = ["9223372036854775808", "18446744073709551616", "99999999999999999999"]


@pytest.mark.parametrize("job_id", TOO_LARGE)
def test_a_job_id_past_64_bits_is_404_or_400(web_server: ServerFactory, job_id: str) -> None:
    server = web_server(token=TOKEN)
    auth = server.bearer()
    code, body, _ = server.request(f"/jobs/{job_id}", headers=auth)
    assert code == 404, body
    code, body, _ = server.request(f"/jobs?find={job_id}", headers=auth)
    assert code == 404 and "no job with id or unique key" in body, body
    assert server.request(f"/jobs?before={job_id}", headers=auth)[0] == 400
    for action in ("retry", "discard", "cancel"):
        assert server.request(f"/jobs/{job_id}/{action}", data={}, headers=auth)[0] == 404
    code, body, _ = server.request("/dead/retry", data={"id": job_id}, headers=auth)
    assert code == 400, body
    assert "Traceback" not in server.log.read_text()


def test_an_address_no_page_has_is_the_error_page_once_signed_in(
    web_server: ServerFactory,
) -> None:
    """`/jobs/abc`, an id past 64 bits, `/jobs?before=abc`, `/nowhere`: the dashboard's own
    error page (its menu, a link back) for a signed-in client; to one that is not, a short
    plain refusal of an address no page has, and the login page for one that has."""
    server = web_server(token=TOKEN)
    auth = server.bearer()
    for path, code, said in (
        ("/jobs/abc", 404, "Not Found: no page at /jobs/abc"),
        (f"/jobs/{TOO_LARGE[-1]}", 404, f"no page at /jobs/{TOO_LARGE[-1]}"),
        ("/handlers/qa.fail", 404, "Not Found: no page at /handlers/qa.fail"),
        ("/jobs?before=abc", 400, "Bad Request: expected a job id"),
        ("/jobs?db=nowhere", 404, "no database &#39;nowhere&#39; in the config"),
    ):
        answer, body, _ = server.request(path, headers=auth)
        assert answer == code and said in body and "back to the overview" in body, (path, body)
        answer, body, _ = server.request(path)  # not signed in: refused, or the login page
        assert (answer, len(body) < 100) in ((code, True), (401, False)), (path, body)
        assert "Something is wrong" not in body and said not in body, (path, body)
    assert "Traceback" not in server.log.read_text()


def test_the_largest_job_id_is_an_ordinary_missing_job(web_server: ServerFactory) -> None:
    server = web_server()
    code, body, _ = server.request("/jobs/9223372036854775807")
    assert code == 404 and "no job with id 9223372036854775807" in body


# --- behind an https proxy (issue 22.8) ---------------------------------------------------------


def session_cookie_attributes(server: WebServer, **headers: str) -> str:
    """The Set-Cookie line of the session a first visit gets."""
    code, _, answer = server.request("/login", headers=headers)
    assert code == 200
    [line] = [v for v in answer.get_all("Set-Cookie") if v.startswith("forkq_session=")]
    return str(line)


def test_the_session_cookie_is_secure_behind_the_trusted_https_proxy(
    web_server: ServerFactory,
) -> None:
    https = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}
    proxied = web_server(token=TOKEN, extra='[web]\ntrusted_proxy = "127.0.0.1"\n')
    assert "; Secure" in session_cookie_attributes(proxied, **https)
    assert "; Secure" not in session_cookie_attributes(proxied)  # plain http to the proxy
    assert '"trusted_proxy": "127.0.0.1"' in proxied.log.read_text()
    # From any other address the header is dropped: a client cannot claim https itself.
    elsewhere = web_server(token=TOKEN, extra='[web]\ntrusted_proxy = "192.0.2.1"\n')
    assert "; Secure" not in session_cookie_attributes(elsewhere, **https)
    untrusted = web_server(token=TOKEN)
    assert "; Secure" not in session_cookie_attributes(untrusted, **https)


def test_a_trusted_proxy_that_is_not_an_address_is_a_config_error(
    tmp_path: Path, db_url: str
) -> None:
    config = write_config(tmp_path, '[web]\ntrusted_proxy = "proxy.example"\n')
    result = subprocess.run(
        [python(), "-m", "supervisor", "web", "-c", str(config), "--listen", "127.0.0.1:1"],
        env=subprocess_env(db_url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 78, result
    assert "web.trusted_proxy" in result.stderr and "IP address" in result.stderr
