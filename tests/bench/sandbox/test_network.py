"""No network from inside a sandbox except the allowed endpoints, through the harness's bridges.

Servers run on the host's 127.0.0.1 in threads of the test; the code inside the sandbox tries to reach them.
The CONNECT proxy needs a host name that is not loopback-named but resolves here (the machine's own name),
because loopback endpoints are bridged port for port instead.
"""

from __future__ import annotations

import http.server
import socket
import socketserver
import threading

import pytest

from bench.sandbox.network import UnixServer, connect_proxy, parse_endpoint

pytestmark = pytest.mark.usefixtures("bwrap_ok")


class Echo(socketserver.ThreadingTCPServer):
    """A TCP server on 127.0.0.1 that answers each line with ``<name>:<line>``."""

    daemon_threads = allow_reuse_address = True

    def __init__(self, name: str, host: str = "127.0.0.1", port: int = 0):
        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                for line in self.rfile:
                    self.wfile.write(f"{name}:".encode() + line)

        super().__init__((host, port), Handler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def __exit__(self, *exc):
        self.shutdown()
        super().__exit__(*exc)


CLIENT = r"""
import json, socket, sys
out = {}
for port in map(int, sys.argv[1:]):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"ping\n")
            out[port] = s.makefile().readline().strip() or "closed"
    except OSError as e:
        out[port] = type(e).__name__
print(json.dumps(out))
"""


def reach(inside, policy, ports: list[int]) -> dict[int, str]:
    code = CLIENT.replace("sys.argv[1:]", repr([str(p) for p in ports]))
    return {int(k): v for k, v in inside(policy, code).items()}


def test_without_endpoints_nothing_is_reachable(harness, inside, policy_of):
    with Echo("host") as server:
        assert reach(inside, policy_of(harness), [server.port]) == {server.port: "ConnectionRefusedError"}
        code = "import json, socket\ntry:\n    socket.getaddrinfo('pypi.org', 443); r = 'resolved'\n"
        code += "except OSError as e:\n    r = type(e).__name__\nprint(json.dumps({'dns': r}))\n"
        assert inside(policy_of(harness), code) == {"dns": "gaierror"}


def test_an_allowed_loopback_port_is_bridged_and_no_other(harness, inside, policy_of):
    with Echo("allowed") as allowed, Echo("other") as other:
        policy = policy_of(harness, endpoints=(f"http://127.0.0.1:{allowed.port}/v1",))
        seen = reach(inside, policy, [allowed.port, other.port])
    assert seen == {allowed.port: "allowed:ping", other.port: "ConnectionRefusedError"}


def test_localhost_endpoint_answers_on_both_loopback_addresses(harness, inside, policy_of):
    with Echo("lh") as server:
        policy = policy_of(harness, endpoints=(f"http://localhost:{server.port}",))
        code = (
            "import json, socket\nout = {}\n"
            f"for host in ('127.0.0.1', '::1', 'localhost'):\n"
            f"    with socket.create_connection((host, {server.port}), timeout=5) as s:\n"
            "        s.sendall(b'x\\n'); out[host] = s.makefile().readline().strip()\n"
            "print(json.dumps(out))\n"
        )
        assert inside(policy, code) == {"127.0.0.1": "lh:x", "::1": "lh:x", "localhost": "lh:x"}


def raw_proxy(proxy: str, target: str) -> str:
    """Code for inside: CONNECT to target through the proxy at ``proxy`` (host:port); the status line, then
    an echo through the tunnel when it opened."""
    host, port = proxy.rsplit(":", 1)
    return (
        "import json, socket\n"
        f"s = socket.create_connection(({host!r}, {port}), timeout=5)\n"
        f"s.sendall(b'CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n')\n"
        "f = s.makefile('rb')\nstatus = f.readline().decode().strip()\n"
        "while f.readline() not in (b'\\r\\n', b''):\n    pass\n"
        "echo = None\n"
        "if ' 200 ' in status:\n    s.sendall(b'tunnel\\n'); echo = f.readline().decode().strip()\n"
        "print(json.dumps({'status': status, 'echo': echo}))\n"
    )


@pytest.fixture
def own_name() -> str:
    """A name of this machine that resolves to a loopback address (not loopback-named: it goes via the proxy)."""
    name = socket.gethostname()
    try:
        if not socket.gethostbyname(name).startswith("127."):
            pytest.skip(f"{name} does not resolve to a loopback address here")
    except OSError:
        pytest.skip(f"{name} does not resolve here")
    if parse_endpoint(f"https://{name}").loopback:
        pytest.skip(f"{name} is a loopback name")
    return name


def test_the_proxy_tunnels_to_an_allowed_host_and_refuses_others(harness, inside, policy_of, own_name):
    with Echo("api", host="0.0.0.0") as api, Echo("elsewhere", host="0.0.0.0") as other:
        policy = policy_of(harness, endpoints=(f"https://{own_name}:{api.port}",))
        env_code = "import json, os\nprint(json.dumps({k: os.environ.get(k) for k in ('HTTPS_PROXY', 'NO_PROXY')}))"
        assert inside(policy, env_code) == {"HTTPS_PROXY": "http://127.0.0.1:3128", "NO_PROXY": "127.0.0.1,localhost"}
        tunnel = inside(policy, raw_proxy("127.0.0.1:3128", f"{own_name}:{api.port}"))
        assert tunnel == {"status": "HTTP/1.1 200 Connection Established", "echo": "api:tunnel"}
        for target in (f"{own_name}:{other.port}", "pypi.org:443", f"127.0.0.1:{api.port}"):
            refused = inside(policy, raw_proxy("127.0.0.1:3128", target))
            assert refused == {"status": "HTTP/1.1 403 Forbidden", "echo": None}, target
        assert reach(inside, policy, [api.port]) == {api.port: "ConnectionRefusedError"}  # only via the proxy


def test_a_stdlib_http_client_goes_through_the_proxy_variables(harness, inside, policy_of, own_name):
    """urllib honours HTTP_PROXY: an absolute-form GET to the allowed host is forwarded, any other is 403."""

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"hello {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://{own_name}:{server.server_address[1]}"
        code = (
            "import json, urllib.request, urllib.error\nout = {}\n"
            f"for u in ({url + '/v1/x'!r}, 'http://example.com/'):\n"
            "    try:\n        out[u] = urllib.request.urlopen(u, timeout=10).read().decode()\n"
            "    except urllib.error.HTTPError as e:\n        out[u] = e.code\n"
            "print(json.dumps(out))\n"
        )
        seen = inside(policy_of(harness, endpoints=(url,)), code)
    finally:
        server.shutdown()
    assert seen == {url + "/v1/x": "hello /v1/x", "http://example.com/": 403}


def test_the_proxy_handler_alone(tmp_path):
    """The outer end without a sandbox: CONNECT to the allowed host:port tunnels, anything else gets 403/400."""
    with Echo("api") as api:
        server = UnixServer(tmp_path / "p.sock", connect_proxy({("127.0.0.1", api.port)}), "proxy")
        try:

            def ask(request: bytes) -> bytes:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(tmp_path / "p.sock"))
                    s.sendall(request)
                    s.settimeout(5)
                    data = s.recv(4096)
                    if data.startswith(b"HTTP/1.1 200"):
                        s.sendall(b"hi\n")
                        data += s.recv(4096)
                    return data

            assert ask(f"CONNECT 127.0.0.1:{api.port} HTTP/1.1\r\n\r\n".encode()).endswith(b"\r\n\r\napi:hi\n")
            assert ask(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 403")
            assert ask(b"GET /relative HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
        finally:
            server.close()


def test_a_loopback_endpoint_on_a_privileged_port(harness, inside, policy_of):
    """A local gateway on port 80 or 443: the launcher keeps the one capability to listen there inside."""
    for port in range(1023, 900, -1):
        try:
            server = Echo("low", port=port)
            break
        except OSError:
            continue
    else:
        pytest.skip("no free port below 1024 (or not allowed to bind one) here")
    with server:
        seen = reach(inside, policy_of(harness, endpoints=(f"http://127.0.0.1:{server.port}",)), [server.port])
        assert seen == {server.port: "low:ping"}
        caps = "import json\nprint(json.dumps([l.split()[1] for l in open('/proc/self/status') if 'CapEff' in l]))"
        assert inside(policy_of(harness, endpoints=(f"http://127.0.0.1:{server.port}",)), caps) == ["0000000000000400"]


def test_the_request_log_records_each_request_and_stops_at_its_limit(tmp_path):
    """The audit's rule-3 evidence: every request the proxy receives is one line (allowed or not); a request loop
    gets ``limit`` lines and one that says the log stopped, not an unbounded file on the harness's disk."""
    import json

    from bench.sandbox.network import RequestLog

    log = RequestLog(tmp_path / "network.jsonl", limit=3)
    with Echo("api") as api:
        server = UnixServer(tmp_path / "p.sock", connect_proxy({("127.0.0.1", api.port)}, log), "proxy")
        try:
            for request in [f"CONNECT 127.0.0.1:{api.port} HTTP/1.1\r\n\r\n"] + [
                "CONNECT evil.example:443 HTTP/1.1\r\n\r\n"
            ] * 5:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(tmp_path / "p.sock"))
                    s.sendall(request.encode())
                    s.settimeout(5)
                    s.recv(4096)
        finally:
            server.close()
    lines = [json.loads(line) for line in (tmp_path / "network.jsonl").read_text().splitlines()]
    assert [(r["host"], r["port"], r["allowed"]) for r in lines[:3]] == [
        ("127.0.0.1", api.port, True),
        ("evil.example", 443, False),
        ("evil.example", 443, False),
    ]
    assert len(lines) == 4 and lines[3]["method"] == "TRUNCATED" and "more than 3" in lines[3]["target"]
