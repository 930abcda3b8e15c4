"""A stand-in for an installed command-line coder (the real ones cannot run in the tests).

Run as `python -c <this file's text> PROMPT_FILE WORKSPACE` inside the sandbox, as the command
back-end starts a CLI: it reads the prompt, asks a model of its choosing through $OPENAI_BASE_URL
(Chat Completions, with whatever key its environment holds), writes the program of the answer's
```python block, runs `submit_attempt`, shows a failed attempt's output to the model and submits
its mended program, and writes workspace/REPORT.md. It leaves its environment in
workspace/env.json. With a third argument `pause-after-attempt-1`, its first start sleeps after
its first attempt (a test kills the station there).
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request


def ask(text):
    base = os.environ["OPENAI_BASE_URL"]
    body = json.dumps({"model": "the-priciest-model", "messages": [{"role": "user", "content": text}]}).encode()
    request = urllib.request.Request(
        f"{base}/chat/completions",
        data=body,
        headers={"content-type": "application/json", "authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return json.loads(reply.read())["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as err:
        sys.exit(f"the model call was refused: {err.code} {err.read().decode()}")


def program(answer):
    found = re.search(r"```python\n(.*?)```", answer, re.S)
    return found.group(1) if found else answer


def main(prompt_file, workspace, pause=False):
    with open(os.path.join(workspace, "env.json"), "w") as f:
        json.dump(dict(os.environ), f)
    with open(prompt_file) as f:
        prompt = f.read()
    path = os.path.join(workspace, "solution.py")
    answer = ask(prompt)
    for attempt in (1, 2):
        with open(path, "w") as f:
            f.write(program(answer))
        done = subprocess.run(["submit_attempt", "workspace/solution.py"], capture_output=True, text=True)
        print(f"attempt {attempt}: exit {done.returncode}")
        marker = os.path.join(workspace, ".paused")
        if pause and not os.path.exists(marker):  # the first start waits here, to be killed
            open(marker, "w").close()
            time.sleep(120)
        if done.returncode == 0:
            break
        answer = ask(f"{prompt}\n\nThe attempt failed:\n{done.stdout}")
    score = re.search(r"Score: (\S+)", done.stdout)
    sections = {
        "Summary": "Implemented the instruction's program.",
        "Final Result": f"The station scored the last attempt {score.group(1) if score else 'nothing'}.",
        "Files Changed": "workspace/solution.py",
        "Implementation Details": "The program of the instruction, as the model wrote it.",
        "Faithfulness and Confidence": "Faithful.",
        "Major Deviations": "None.",
        "Final Status": "done" if done.returncode == 0 else "blocked",
    }
    with open(os.path.join(workspace, "REPORT.md"), "w") as f:
        f.write("".join(f"## {name}\n\n{text}\n\n" for name, text in sections.items()))
    print("fake coder: report written")


main(sys.argv[1], sys.argv[2], pause=sys.argv[3:] == ["pause-after-attempt-1"])
