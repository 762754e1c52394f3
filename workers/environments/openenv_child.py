"""The harness of a jailed OpenEnv environment server (workers/environments/openenv_jail.py starts it). Stdlib only
until the user's packages: run as `python -I -S /harness/sandbox_child.py LISTEN_FD READY_FD` with its config as
JSON on stdin.

1. (as root) drop to the jail uid.
2. The packages dir (`environment.requirements`, bound read-only) on sys.path; STREAMRL_ENV_SERVER_START set to
   this server's start number (1, then 2 after a restart...); the user's code run; its `app` taken.
3. One line on READY_FD: "ready", or the error that kept the server from starting; then uvicorn serves `app` on
   LISTEN_FD, a unix socket the worker bound and listens on outside the jail (the server's only endpoint).
"""

import json
import os
import sys
import traceback
import types

PACKAGES = "/env-packages"


def _error_text(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<environment>"]
    where = f" (line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"[:1000]


def main() -> None:
    listen_fd, ready_fd = int(sys.argv[1]), int(sys.argv[2])
    config = json.loads(sys.stdin.read())
    if config.get("drop_uid") is not None:
        os.setgroups([])
        os.setgid(int(config["drop_uid"]))
        os.setuid(int(config["drop_uid"]))
    if os.path.isdir(PACKAGES):
        sys.path.insert(0, PACKAGES)
    os.environ["STREAMRL_ENV_SERVER_START"] = str(int(config["start"]))
    os.environ.setdefault("PATH", "/usr/bin:/bin")  # libraries read it (the jail's environment is otherwise empty)
    try:
        module = types.ModuleType("openenv_server")  # a real module: pydantic resolves its models' annotations
        sys.modules[module.__name__] = module
        exec(compile(config["code"], "<environment>", "exec"), module.__dict__)
        app = getattr(module, "app", None)
        if app is None:
            raise NameError("the code must define `app`, the server's ASGI app")
        import uvicorn

        server = uvicorn.Server(uvicorn.Config(app, fd=listen_fd, log_level="warning", ws_ping_interval=None,
                                               lifespan="auto"))
    except BaseException as exc:  # the code's failure is the server's start error
        os.write(ready_fd, ("error " + json.dumps(_error_text(exc))).encode())
        os.close(ready_fd)
        os._exit(1)
    os.write(ready_fd, b"ready")
    os.close(ready_fd)
    server.run()
    os._exit(0)


if __name__ == "__main__":
    main()
