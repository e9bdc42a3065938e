"""A loopback stand-in for the Verda cloud API and for ssh/scp, for testing
tools/ops/verda_cuda_gate.sh without renting anything.

The API (on 127.0.0.1, a free port, under /v1, JSON as the real API and its SDK use it):
  POST /v1/oauth2/token          client_credentials -> access_token (401 for other credentials)
  GET  /v1/instance-types        one H200 type with its price_per_hour
  POST /v1/instances             create -> the id as plain text; an OS volume is made with it
  GET  /v1/instances[/ID]        status ordered -> provisioning -> running (with an ip) as the
                                 instance is polled; 404 once deleted
  PUT  /v1/instances             {id: [...], action: delete, volume_ids, delete_permanently}
  GET  /v1/volumes[/ID], DELETE /v1/volumes/ID
Every request is recorded (method, path, parsed JSON body, whether it carried the token) in
`calls`. Fault injection: `create_status = 503` fails the create; `final_status = "error"`
sends the instance to that status instead of running; `never_runs = True` keeps it
provisioning; `keep_volumes = True` makes the instance delete leave its volumes detached (the
script must then delete them itself); `polls_to_run = n` polls before it runs.

ssh/scp: `python fake_verda.py ssh [opts] USER@HOST CMD` and `... scp [opts] SRC DST` append
their argv to $FAKE_VERDA_DIR/ssh.log. ssh answers `true` (the reachability probe); for a
command that runs device_gate.sh it sleeps $FAKE_GATE_SLEEP seconds (after writing
$FAKE_VERDA_DIR/gate.started) and exits $FAKE_GATE_RC. scp of a remote device_gate.log copies
$FAKE_GATE_LOG to the destination; an upload checks its source exists.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CLIENT_ID, CLIENT_SECRET, TOKEN = "test-client", "test-secret", "tok-123"
H200 = "1H200.141S.44V"


class FakeVerda:
    def __init__(self):
        self.calls: list[dict] = []
        self.instances: dict[str, dict] = {}
        self.volumes: dict[str, dict] = {}
        self.polls: dict[str, int] = {}
        self.create_status = 0
        self.final_status = "running"
        self.never_runs = False
        self.keep_volumes = False
        self.polls_to_run = 2
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    # -- what the tests ask ----------------------------------------------------------------
    def live_instances(self):
        return [i for i in self.instances.values() if i["status"] != "deleted"]

    def live_volumes(self):
        return [v for v in self.volumes.values() if v["status"] != "deleted"]

    def calls_to(self, method, path_prefix):
        return [c for c in self.calls if c["method"] == method and c["path"].startswith(path_prefix)]

    # -- the API ---------------------------------------------------------------------------
    def _status_of(self, inst):
        if inst["status"] in ("deleted", "error", "running"):
            return inst["status"]
        n = self.polls[inst["id"]] = self.polls.get(inst["id"], 0) + 1
        if self.never_runs:
            inst["status"] = "provisioning"
        elif n >= self.polls_to_run:
            inst["status"] = self.final_status
            if inst["status"] == "running":
                inst["ip"] = "203.0.113.7"
        else:
            inst["status"] = "provisioning" if n > 1 else "ordered"
        return inst["status"]

    def handle(self, method, path, body, authed):
        """-> (status, payload); a str payload is sent as text, anything else as JSON."""
        path = path.split("?")[0]
        if path == "/v1/oauth2/token" and method == "POST":
            if (body or {}).get("client_id") == CLIENT_ID and body.get("client_secret") == CLIENT_SECRET \
                    and body.get("grant_type") == "client_credentials":
                return 200, {"access_token": TOKEN, "refresh_token": "r", "scope": "cloud-api-v1",
                             "token_type": "Bearer", "expires_in": 3600}
            return 401, {"code": "unauthorized_request", "message": "Invalid client credentials"}
        if not authed:
            return 401, {"code": "unauthorized_request", "message": "missing or bad token"}
        if path == "/v1/instance-types" and method == "GET":
            return 200, [{"id": "t1", "instance_type": H200, "price_per_hour": "3.29",
                          "spot_price": "1.10", "currency": "usd"}]
        if path == "/v1/instances" and method == "POST":
            if self.create_status:
                return self.create_status, {"code": "service_unavailable", "message": "no capacity"}
            iid, vid = str(uuid.uuid4()), str(uuid.uuid4())
            self.instances[iid] = {"id": iid, "instance_type": body["instance_type"],
                                   "hostname": body["hostname"], "status": "ordered", "ip": None,
                                   "os_volume_id": vid, "price_per_hour": 3.29}
            self.volumes[vid] = {"id": vid, "status": "attached", "instance_id": iid,
                                 "is_os_volume": True, "size": body["os_volume"]["size"]}
            return 200, iid
        if path == "/v1/instances" and method == "GET":
            return 200, [dict(i) for i in self.live_instances()]
        if path.startswith("/v1/instances/") and method == "GET":
            inst = self.instances.get(path.rsplit("/", 1)[1])
            if not inst or inst["status"] == "deleted":
                return 404, {"code": "not_found", "message": "instance not found"}
            self._status_of(inst)
            return 200, dict(inst)
        if path == "/v1/instances" and method == "PUT":
            if body.get("action") != "delete":
                return 400, {"code": "invalid_request", "message": "unsupported action"}
            for iid in body["id"]:
                inst = self.instances.get(iid)
                if not inst or inst["status"] == "deleted":
                    return 404, {"code": "not_found", "message": f"instance {iid} not found"}
                inst["status"] = "deleted"
                for v in self.volumes.values():
                    if v["instance_id"] != iid:
                        continue
                    v["instance_id"] = None
                    v["status"] = "detached"
                    if (not self.keep_volumes and v["id"] in (body.get("volume_ids") or [])
                            and body.get("delete_permanently")):
                        v["status"] = "deleted"
            return 202, ""
        if path == "/v1/volumes" and method == "GET":
            return 200, [dict(v) for v in self.live_volumes()]
        if path.startswith("/v1/volumes/"):
            vol = self.volumes.get(path.rsplit("/", 1)[1])
            if not vol or vol["status"] == "deleted":
                return 404, {"code": "not_found", "message": "volume not found"}
            if method == "GET":
                return 200, dict(vol)
            if method == "DELETE":
                if vol["instance_id"]:
                    return 400, {"code": "invalid_request", "message": "volume is attached"}
                vol["status"] = "deleted"
                return 202, ""
        return 404, {"code": "not_found", "message": f"no route {method} {path}"}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _do(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = {"_unparsed": raw.decode(errors="replace")}
                authed = self.headers.get("Authorization") == f"Bearer {TOKEN}"
                with fake.lock:
                    fake.calls.append({"method": self.command, "path": self.path, "body": body,
                                       "authed": authed, "t": time.time()})
                    status, payload = fake.handle(self.command, self.path, body, authed)
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(payload, str)
                                 else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _do

        return Handler


# ---- fake ssh / scp --------------------------------------------------------------------------

def _record(argv):
    d = os.environ["FAKE_VERDA_DIR"]
    with open(os.path.join(d, "ssh.log"), "a") as f:
        f.write(json.dumps(argv) + "\n")
    return d


def fake_ssh(argv) -> int:
    d = _record(["ssh"] + argv)
    cmd = argv[-1] if argv else ""
    if "device_gate.sh" in cmd:
        open(os.path.join(d, "gate.started"), "w").close()
        time.sleep(float(os.environ.get("FAKE_GATE_SLEEP", "0")))
        return int(os.environ.get("FAKE_GATE_RC", "0"))
    return 0


def fake_scp(argv) -> int:
    _record(["scp"] + argv)
    src, dst = argv[-2], argv[-1]
    if ":" in src:  # remote -> local
        if src.endswith("device_gate.log") and os.environ.get("FAKE_GATE_LOG"):
            shutil.copyfile(os.environ["FAKE_GATE_LOG"], dst)
            return 0
        return 1
    return 0 if os.path.exists(src) else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "ssh":
        sys.exit(fake_ssh(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "scp":
        sys.exit(fake_scp(sys.argv[2:]))
    fv = FakeVerda().start()
    print(f"fake Verda API at {fv.url} (client {CLIENT_ID} / {CLIENT_SECRET}); Ctrl-C stops it")
    try:
        fv.thread.join()
    except KeyboardInterrupt:
        fv.stop()
