"""Drives the pDKVS gateway and a real redis-server 7 through the same
command script (redis-py, RESP2 and RESP3, raw sockets) and compares every
answer: exactly, or TTLs within a tolerance, SCAN by its set of keys, INFO /
CLIENT LIST / COMMAND DOCS / HELLO by shape. Then kill -9 of the gateway
and a restart: every acknowledged key is still there.

The gateway's store is given by its flags: a local store (--pm FILE
--pm-size 256MiB) or a PDPM cluster (--monitor ADDR --secret-file F).

usage: redis_compat_test.py GATEWAY_BINARY REDIS_PORT STORE_FLAGS..."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import redis

failures = []
children = []  # processes to kill if the script dies


def check(cond, what):
    if not cond:
        failures.append(what)
        print("MISMATCH:", what, flush=True)


def run(client, args):
    try:
        return ("ok", client.execute_command(*args))
    except (redis.ResponseError, redis.AuthenticationError) as e:
        return ("err", str(e))


def scan_all(client, *opts):
    keys, cursor = set(), 0
    while True:
        cursor, page = client.execute_command("SCAN", cursor, *opts)
        keys.update(page)
        cursor = int(cursor)
        if cursor == 0:
            return ("ok", sorted(keys))


EXACT, TTL, SHAPE = "exact", "ttl", "shape"

# (comparison, command). Each runs on both servers in this order.
SCRIPT = [
    (EXACT, ["PING"]), (EXACT, ["PING", "hello"]), (EXACT, ["ECHO", "x y"]),
    (EXACT, ["SELECT", "0"]), (EXACT, ["SELECT", "99"]), (EXACT, ["SELECT", "x"]),
    (EXACT, ["SET", "k", "v"]), (EXACT, ["GET", "k"]), (EXACT, ["SET", "k", "v2", "NX"]),
    (EXACT, ["SET", "k", "v3", "XX"]), (EXACT, ["GET", "k"]), (EXACT, ["SET", "k", "v4", "GET"]),
    (EXACT, ["SET", "nk", "v", "XX"]), (EXACT, ["SET", "k", "v5", "NX", "GET"]),
    (EXACT, ["SET", "k", "v", "EX", "100"]), (TTL, ["TTL", "k"]), (TTL, ["PTTL", "k"]),
    (EXACT, ["SET", "k", "v2", "KEEPTTL"]), (TTL, ["TTL", "k"]),
    (EXACT, ["SET", "k", "v", "PX", "100000"]), (TTL, ["PTTL", "k"]), (EXACT, ["SET", "k", "v"]),
    (EXACT, ["TTL", "k"]), (EXACT, ["SET", "k", "v", "EX", "0"]),
    (EXACT, ["SET", "k", "v", "EX", "abc"]), (EXACT, ["SET", "k", "v", "NX", "XX"]),
    (EXACT, ["SET", "k", "v", "EX", "10", "PX", "10"]), (EXACT, ["SET", "k", "v", "KEEPTTL", "EX", "5"]),
    (EXACT, ["SET", "k", "v", "BOGUS"]), (EXACT, ["SET", "k"]), (EXACT, ["GET"]),
    (EXACT, ["GET", "a", "b"]), (EXACT, ["SETNX", "k", "x"]), (EXACT, ["SETNX", "k2", "x"]),
    (EXACT, ["GETSET", "k", "new"]), (EXACT, ["GETSET", "absent1", "v"]), (EXACT, ["GETDEL", "k"]),
    (EXACT, ["GETDEL", "k"]), (EXACT, ["MSET", "a", "1", "b", "2", "c", "3"]),
    (EXACT, ["MGET", "a", "b", "missing", "c"]), (EXACT, ["MSET", "a"]), (EXACT, ["MSET", "a", "1", "b"]),
    (EXACT, ["MSETNX", "a", "9", "z", "9"]), (EXACT, ["MSETNX", "y", "1", "z", "2"]),
    (EXACT, ["MGET", "a", "z"]), (EXACT, ["DEL", "a", "b", "missing"]), (EXACT, ["UNLINK", "c"]),
    (EXACT, ["EXISTS", "y", "z", "y", "missing"]), (EXACT, ["INCR", "n"]),
    (EXACT, ["INCRBY", "n", "10"]), (EXACT, ["DECR", "n"]), (EXACT, ["DECRBY", "n", "5"]),
    (EXACT, ["INCRBY", "n", "abc"]), (EXACT, ["INCRBY", "n", "1.5"]), (EXACT, ["SET", "s", "hello"]),
    (EXACT, ["INCR", "s"]), (EXACT, ["SET", "lz", "007"]), (EXACT, ["INCR", "lz"]),
    (EXACT, ["SET", "big", "9223372036854775807"]), (EXACT, ["INCR", "big"]),
    (EXACT, ["DECRBY", "big", "-1"]), (EXACT, ["SET", "small", "-9223372036854775808"]),
    (EXACT, ["DECR", "small"]), (EXACT, ["DECRBY", "n", "-9223372036854775808"]),
    (EXACT, ["APPEND", "s", " world"]), (EXACT, ["APPEND", "fresh", "abc"]),
    (EXACT, ["STRLEN", "s"]), (EXACT, ["STRLEN", "missing"]), (EXACT, ["GETRANGE", "s", "0", "4"]),
    (EXACT, ["GETRANGE", "s", "-5", "-1"]), (EXACT, ["GETRANGE", "s", "10", "2"]),
    (EXACT, ["GETRANGE", "s", "-100", "100"]), (EXACT, ["GETRANGE", "missing", "0", "1"]),
    (EXACT, ["GETRANGE", "s", "x", "1"]), (EXACT, ["SETRANGE", "s", "6", "WORLD"]),
    (EXACT, ["GET", "s"]), (EXACT, ["SETRANGE", "pad", "5", "x"]), (EXACT, ["GET", "pad"]),
    (EXACT, ["SETRANGE", "none", "3", ""]), (EXACT, ["EXISTS", "none"]),
    (EXACT, ["SETRANGE", "s", "-1", "x"]), (EXACT, ["SETRANGE", "s", "536870912", "x"]),
    (EXACT, ["EXPIRE", "s", "100"]), (TTL, ["TTL", "s"]), (EXACT, ["PEXPIRE", "s", "100000"]),
    (TTL, ["PTTL", "s"]), (EXACT, ["INCR", "n"]), (EXACT, ["PERSIST", "s"]), (EXACT, ["PERSIST", "s"]),
    (EXACT, ["TTL", "s"]), (EXACT, ["TTL", "missing"]), (EXACT, ["PTTL", "missing"]),
    (EXACT, ["EXPIRE", "missing", "10"]), (EXACT, ["EXPIRE", "s", "abc"]),
    (EXACT, ["SET", "gone", "1"]), (EXACT, ["EXPIRE", "gone", "-1"]), (EXACT, ["EXISTS", "gone"]),
    (EXACT, ["SET", "soon", "1", "PX", "1"]), (EXACT, ["TYPE", "y"]), (EXACT, ["TYPE", "missing"]),
    (EXACT, ["SCAN", "abc"]), (EXACT, ["SCAN", "0", "COUNT", "0"]), (EXACT, ["SCAN", "0", "BOGUS", "1"]),
    (EXACT, ["FOO", "bar", "baz"]), (EXACT, ["CLIENT", "SETNAME", "tester"]),
    (EXACT, ["CLIENT", "GETNAME"]), (EXACT, ["CLIENT", "SETNAME", "a b"]),
    (EXACT, ["CLIENT", "BOGUS"]), (EXACT, ["CONFIG", "GET", "maxmemory"]),
    (EXACT, ["CONFIG", "GET", "appendonly"]), (EXACT, ["HELLO", "4"]), (EXACT, ["HELLO", "x"]),
    (EXACT, ["AUTH", "x"]), (EXACT, ["AUTH", "someone", "x"]),
    (SHAPE, ["CLIENT", "ID"]), (SHAPE, ["CLIENT", "LIST"]), (SHAPE, ["COMMAND", "COUNT"]),
    (SHAPE, ["COMMAND", "DOCS", "get"]), (SHAPE, ["INFO"]), (SHAPE, ["INFO", "keyspace"]),
    (SHAPE, ["HELLO", "2"]),
]


def shape(args, result):
    kind, v = result
    if kind == "err":
        return ("err",)
    name = " ".join(args[:2]).upper()
    if name in ("CLIENT ID", "COMMAND COUNT"):
        return ("int", isinstance(v, int) and v > 0)
    if name == "CLIENT LIST":
        # A client the previous step closed may still be listed until the
        # server has seen its close: compare the fields of every line and
        # require the caller's own line, not the number of lines.
        lines = v.decode().splitlines()
        fields = sorted({tuple(f.split("=")[0] for f in line.split()[:5]) for line in lines})
        return ("list", tuple(fields), any("cmd=client" in line for line in lines))
    if name == "COMMAND DOCS":
        return ("docs", isinstance(v, list) and v[0] == b"get" and b"summary" in v[1])
    if name.startswith("INFO"):
        text = v.decode()
        return ("info", "# Keyspace" in text, ("redis_version:" in text) == (len(args) == 1))
    if name.startswith("HELLO"):
        d = v if isinstance(v, dict) else dict(zip(v[0::2], v[1::2]))
        return ("hello", sorted(d.keys()), d[b"proto"])
    return (kind, type(v).__name__)


def compare(kind, args, a, b):
    what = f"{args}: gateway {a!r} redis {b!r}"
    if kind == EXACT:
        check(a == b, what)
    elif kind == TTL:
        tolerance = 1500 if args[0] == "PTTL" else 1
        check(a[0] == b[0] == "ok" and abs(a[1] - b[1]) <= tolerance, what)
    else:
        check(shape(args, a) == shape(args, b), what + f" shapes {shape(args, a)} {shape(args, b)}")


def raw(port, data, read_until_close=False):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(data)
    s.settimeout(5)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
            if not read_until_close and out.endswith(b"\r\n") and len(out) >= expected_len[0]:
                break
    except socket.timeout:
        pass
    s.close()
    return out


expected_len = [0]


def start_gateway(binary, store, extra_env=None):
    env = dict(os.environ)
    env.pop("PDKVS_PASSWORD", None)
    env.update(extra_env or {})
    p = subprocess.Popen([binary, "--listen", "127.0.0.1:0", *store, "--enable-flushdb"],
                         stdout=subprocess.PIPE, env=env)
    children.append(p)
    line = p.stdout.readline().decode()
    if not line.startswith("port="):
        raise SystemExit("gateway did not start: " + line)
    return p, int(line.strip().split("=")[1])


def main():
    binary, redis_port, store = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    gw, gw_port = start_gateway(binary, store)
    clients = {port: redis.Redis(port=port, protocol=2) for port in (gw_port, redis_port)}
    for c in clients.values():
        c.response_callbacks.clear()  # compare what the servers sent
    for c in clients.values():
        c.execute_command("FLUSHDB")
    results = {port: [] for port in clients}
    # One server at a time through the whole script, then compare.
    for port, c in clients.items():
        for kind, args in SCRIPT:
            results[port].append(run(c, args))
        time.sleep(0.01)
        results[port].append(run(c, ["EXISTS", "soon"]))
        results[port].append(scan_all(c))
        results[port].append(scan_all(c, "MATCH", "[a-n]*", "COUNT", "3"))
        results[port].append(scan_all(c, "TYPE", "string"))
        results[port].append(scan_all(c, "TYPE", "list"))
        results[port].append(run(c, ["KEYS", "*"]))
        results[port].append(run(c, ["DBSIZE"]))
    extra = [(EXACT, ["EXISTS", "soon"]), (EXACT, ["SCAN"]), (EXACT, ["SCAN", "MATCH"]),
             (EXACT, ["SCAN", "TYPE"]), (EXACT, ["SCAN", "TYPE", "list"]), (EXACT, ["KEYS"]),
             (EXACT, ["DBSIZE"])]
    for i, (kind, args) in enumerate(SCRIPT + extra):
        a, b = results[gw_port][i], results[redis_port][i]
        if args[0] == "KEYS":
            a, b = (a[0], sorted(a[1])), (b[0], sorted(b[1]))
        compare(kind, args, a, b)

    # RESP3 through redis-py: nulls, maps.
    for port in clients:
        c3 = redis.Redis(port=port, protocol=3)
        c3.response_callbacks.clear()
        results[port] = [run(c3, ["GET", "missing"]), run(c3, ["CONFIG", "GET", "maxmemory"]),
                         run(c3, ["MGET", "y", "missing"]), run(c3, ["SET", "nx", "1", "XX"]),
                         shape(["HELLO", "3"], run(c3, ["HELLO", "3"]))]
        c3.close()
    check(results[gw_port] == results[redis_port], f"RESP3 {results[gw_port]} {results[redis_port]}")

    # Raw protocol: pipelining in one write, inline commands, protocol errors.
    pipeline = b"".join(b"*3\r\n$3\r\nSET\r\n$3\r\np%02d\r\n$1\r\nv\r\n" % i for i in range(50))
    pipeline += b"*2\r\n$3\r\nGET\r\n$3\r\np49\r\nPING\r\nECHO \"a b\"\r\n*1\r\n$4\r\nQUIT\r\n"
    for name, data in [("pipeline", pipeline),
                       ("bad bulk length", b"PING\r\n*1\r\n$x\r\nPING\r\n"),
                       ("bad multibulk", b"*1x\r\n"), ("expected $", b"*1\r\n:1\r\n"),
                       ("unbalanced quotes", b"GET \"a\r\n"),
                       ("unknown then usable", b"NOPE\r\nPING\r\n*1\r\n$4\r\nQUIT\r\n")]:
        a, b = raw(gw_port, data, True), raw(redis_port, data, True)
        check(a == b, f"raw {name}: gateway {a!r} redis {b!r}")

    # redis-cli through the same lines.
    cli_script = "SET cli 1\nINCRBY cli 41\nGET cli\nMGET cli nothing\nGETRANGE cli 0 0\nDEL cli\nINCR\n"
    outs = [subprocess.run(["redis-cli", "-p", str(p)], input=cli_script.encode(),
                           capture_output=True).stdout for p in (gw_port, redis_port)]
    check(outs[0] == outs[1], f"redis-cli: gateway {outs[0]!r} redis {outs[1]!r}")

    # Passwords: from the environment and from a file, as redis-server's requirepass.
    for c in clients.values():
        c.close()
    gw.send_signal(signal.SIGTERM)
    gw.wait()
    red2 = subprocess.Popen(["redis-server", "--port", str(redis_port + 1), "--save", "",
                             "--appendonly", "no", "--requirepass", "s3cret"],
                            stdout=subprocess.DEVNULL)
    children.append(red2)
    gw, gw_port = start_gateway(binary, store, {"PDKVS_PASSWORD": "s3cret"})
    time.sleep(0.3)
    auth_raw = (b"GET y\r\nHELLO 3\r\nAUTH wrong\r\nAUTH default wrong\r\nAUTH a b c\r\n"
                b"AUTH s3cret\r\nEXISTS nothere\r\nQUIT\r\n")
    a, b = raw(gw_port, auth_raw, True), raw(redis_port + 1, auth_raw, True)
    check(a == b, f"auth: gateway {a!r} redis {b!r}")
    try:
        c = redis.Redis(port=gw_port, protocol=3, username="default", password="s3cret",
                        client_name="named")
        check(c.client_getname() == b"named", "HELLO 3 AUTH SETNAME")
        c.close()
    finally:
        red2.terminate()
        red2.wait()

    # Many clients at once (spread over the event loops): atomic increments.
    def incr_many():
        c = redis.Redis(port=gw_port, password="s3cret")
        for _ in range(200):
            c.incr("shared:counter")
            c.append("shared:log", "x")
        c.close()

    workers = [threading.Thread(target=incr_many) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    c = redis.Redis(port=gw_port, password="s3cret")
    check(c.get("shared:counter") == b"1600", "concurrent INCR lost updates")
    check(c.strlen("shared:log") == 1600, "concurrent APPEND lost updates")
    c.close()

    # kill -9 with acknowledged writes, restart: every one is there.
    c = redis.Redis(port=gw_port, password="s3cret")
    pipe = c.pipeline(transaction=False)
    for i in range(2000):
        pipe.set(f"durable:{i}", f"value-{i}" * (1 + i % 7))
    pipe.incrby("durable:counter", 2000)
    assert all(pipe.execute())
    c.close()
    gw.send_signal(signal.SIGKILL)
    gw.wait()
    gw, gw_port = start_gateway(binary, store, {"PDKVS_PASSWORD": "s3cret"})
    c = redis.Redis(port=gw_port, password="s3cret")
    values = c.mget([f"durable:{i}" for i in range(2000)])
    lost = [i for i, v in enumerate(values) if v != (f"value-{i}" * (1 + i % 7)).encode()]
    check(not lost, f"lost after kill -9: {lost[:10]}")
    check(c.get("durable:counter") == b"2000", "counter after kill -9")
    c.close()
    gw.send_signal(signal.SIGTERM)
    gw.wait()
    if failures:
        print(f"FAIL: {len(failures)} mismatches")
        sys.exit(1)
    print(f"OK: {len(SCRIPT) + len(extra)} scripted commands, RESP3, raw protocol, redis-cli, "
          "auth, concurrent clients, kill -9 restart")


if __name__ == "__main__":
    try:
        main()
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
