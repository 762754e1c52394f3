"""A local stand-in for the Hugging Face Hub on 127.0.0.1, serving model and dataset directories in the Hub's URL
layout.

    with HubServer({"acme/tiny-chat": model_dir}, datasets={"acme/chats": data_dir}) as hub:   # hub.url: HF_ENDPOINT
        snapshot_download("acme/tiny-chat", endpoint=hub.url, ...)
        snapshot_download("acme/chats", repo_type="dataset", endpoint=hub.url, ...)

Serves what `huggingface_hub.snapshot_download` asks for: `GET /api/models/<repo>/revision/<rev>` (the commit sha),
`GET /api/models/<repo>/tree/<sha>` (the file list with sizes), `HEAD|GET /<repo>/resolve/<rev>/<file>` (file
bytes with `X-Repo-Commit` and `ETag`); dataset repos the same under `/api/datasets/` and
`/datasets/<repo>/resolve/`. Any revision other than `main` or the commit is a 404 (RevisionNotFound); an unknown
repo is a 401 like the Hub's answer for a private repo. `downloads` counts file downloads.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse


class HubServer:
    def __init__(self, repos: dict[str, Path], datasets: dict[str, Path] | None = None):
        self.repos = repos
        self.datasets = datasets or {}
        self.shas = {repo: hashlib.sha1(repo.encode()).hexdigest() for repo in [*repos, *self.datasets]}
        self.downloads: Counter[str] = Counter()
        self.authorizations: list[str] = []  # Authorization headers of file downloads
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
                hub.answer(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                hub.answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> HubServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def _repo_and_rest(repos: dict[str, Path], path: str) -> tuple[str | None, str]:
        for repo in repos:
            if path.startswith(repo + "/"):
                return repo, path[len(repo) + 1 :]
        return None, path

    def answer(self, request: BaseHTTPRequestHandler, *, body: bool) -> None:
        path = unquote(urlparse(request.path).path).lstrip("/")
        api = path.startswith("api/")
        path = path.removeprefix("api/")
        is_dataset = path.startswith("datasets/")
        repos = self.datasets if is_dataset else self.repos
        repo, rest = self._repo_and_rest(repos, path.removeprefix("datasets/" if is_dataset else "models/"))
        if repo is None:
            return self._send(request, 401, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}, body)
        sha, root = self.shas[repo], repos[repo]
        kind, _, tail = rest.partition("/")
        revision, _, filename = tail.partition("/")
        if revision not in ("main", sha):
            return self._send(request, 404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"}, body)
        files = sorted(p for p in root.rglob("*") if p.is_file())
        if api and kind == "revision":
            siblings = [{"rfilename": str(p.relative_to(root))} for p in files]
            return self._send(request, 200, {"id": repo, "modelId": repo, "sha": sha, "siblings": siblings}, {}, body)
        if api and kind == "tree":
            tree = [{"type": "file", "path": str(p.relative_to(root)), "size": p.stat().st_size,
                     "oid": hashlib.sha1(p.read_bytes()).hexdigest()} for p in files]
            return self._send(request, 200, tree, {}, body)
        target = root / filename
        if kind != "resolve" or not target.is_file() or root not in target.resolve().parents:
            return self._send(request, 404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"}, body)
        data = target.read_bytes()
        if body:
            self.downloads[filename] += 1
            self.authorizations.append(request.headers.get("Authorization", ""))
        request.send_response(200)
        for key, value in {"Content-Length": str(len(data)), "X-Repo-Commit": sha,
                           "ETag": f'"{hashlib.sha1(data).hexdigest()}"'}.items():
            request.send_header(key, value)
        request.end_headers()
        if body:
            request.wfile.write(data)

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str], body: bool) -> None:
        data = json.dumps(payload).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            request.send_header(key, value)
        request.end_headers()
        if body:
            request.wfile.write(data)
