"""Runs a command-line coder inside the sandbox (standalone: the station appends `main("<config>")`).

The run's network namespace has only its own loopback (RunSpec.loopback). This script listens on
127.0.0.1 and carries each connection's bytes to the station's relay, a Unix socket in the
channel folder (relay.py, outside the sandbox), so a CLI pointed at http://127.0.0.1:<port> reaches
its model through the station, which adds the key: no key is ever in here. It puts
`submit_attempt PATH` on the CLI's PATH (an official attempt, answered by the station), starts the
CLI with `{prompt_file}` and `{workspace}` filled in, stops it when the station leaves a `stop`
file in the channel, and exits with the CLI's exit status.
"""

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

CHUNK = 65536
SUBMIT = """import json, sys, urllib.request
if len(sys.argv) != 2:
    sys.exit("usage: submit_attempt PATH   (the program of your workspace to run, e.g. workspace/solution.py)")
asked = json.dumps({{"path": sys.argv[1]}}).encode()
request = urllib.request.Request("http://127.0.0.1:{port}/station/submit", data=asked, method="POST",
                                 headers={{"content-type": "application/json"}})
with urllib.request.urlopen(request, timeout=None) as reply:
    answer = json.loads(reply.read())
print(answer["text"])
sys.exit(1 if answer["error"] else 0)
"""


def pipe(source, sink):
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def carry(client, relay_path):
    """One TCP connection to the relay's Unix socket, both ways."""
    relay = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        relay.connect(relay_path)
    except OSError:
        client.close()
        relay.close()
        return
    back = threading.Thread(target=pipe, args=(relay, client), daemon=True)
    back.start()
    pipe(client, relay)
    back.join()
    client.close()
    relay.close()


def listen(relay_path):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(64)

    def accept():
        while True:
            client, _ = server.accept()
            threading.Thread(target=carry, args=(client, relay_path), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server.getsockname()[1]


def main(encoded):
    cfg = json.loads(base64.b64decode(encoded))
    here = os.getcwd()
    channel = os.path.join(here, cfg["channel"])
    port = listen(os.path.join(channel, "relay.sock"))
    tools, home = os.path.join(here, ".station-bin"), os.path.join(here, ".home")
    os.makedirs(tools, exist_ok=True)
    os.makedirs(home, exist_ok=True)
    submit = os.path.join(tools, "submit_attempt")
    with open(submit, "w") as f:
        f.write(f"#!{sys.executable} -I\n" + SUBMIT.format(port=port))
    os.chmod(submit, 0o755)
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.update(
        PATH=f"{tools}:{env.get('PATH', '/usr/bin:/bin')}",
        HOME=home,
        ANTHROPIC_BASE_URL=url,
        OPENAI_BASE_URL=url + "/v1",
        GOOGLE_GEMINI_BASE_URL=url,
        STATION_RELAY_URL=url,
    )
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"):
        env[name] = "station-relay"  # a CLI wants one; the relay puts the station's own in its place
    prompt_file, workspace = os.path.join(channel, "prompt.md"), os.path.join(here, "workspace")
    argv = [arg.replace("{prompt_file}", prompt_file).replace("{workspace}", workspace) for arg in cfg["argv"]]
    try:
        cli = subprocess.Popen(argv, env=env, start_new_session=True)
    except OSError as err:
        print(f"the coder's command could not start: {argv[0]}: {err.strerror}", file=sys.stderr)
        sys.exit(127)
    stop = os.path.join(channel, "stop")
    while cli.poll() is None:
        if os.path.exists(stop):
            print("stopped by the station", file=sys.stderr)
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()
            break
        time.sleep(0.3)
    sys.exit(cli.returncode if cli.returncode >= 0 else 128 - cli.returncode)
