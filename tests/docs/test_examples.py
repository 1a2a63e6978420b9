"""The guides open with an example, and those examples run: each fenced block named here
is extracted from its page and executed as the page says to (the Python saved as the file
the page names, the commands run with the venv's ``acp-agent-kit``), against the project's
fake OpenAI-compatible endpoint where a model is needed."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fake_model import fake_model_url
from tests.helpers.wire_client import child_env

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
COMMAND = str(Path(sys.executable).with_name("acp-agent-kit"))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)

#: guide -> the language of the example it opens with (within its first 40 lines)
OPENING = {
    "writing-an-agent.md": "python",
    "adapters.md": "python",
    "testing.md": "python",
    "llm-agent.md": "sh",
    "serving.md": "sh",
}


def blocks(page: str, language: str) -> list[tuple[int, str]]:
    """The fenced blocks of ``language`` in ``docs/page``: (first line, text)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start()) + 1, match[2])
        for match in FENCE.finditer(text)
        if match[1] == language
    ]


def command_line(page: str, starts: str) -> list[str]:
    """The first command of ``page``'s first sh block that starts with ``starts``, split,
    with ``acp-agent-kit`` and ``python`` as this venv's."""
    for line in blocks(page, "sh")[0][1].splitlines():
        if line.startswith(starts):
            words = shlex.split(line.partition("#")[0])
            return [{"acp-agent-kit": COMMAND, "python": sys.executable}.get(w, w) for w in words]
    raise AssertionError(f"docs/{page}: no `{starts}` in its first sh block")


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    home = {"HOME": str(cwd), "XDG_DATA_HOME": str(cwd / "data"), **env}
    return subprocess.run(
        args, cwd=cwd, env=child_env(home), capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    with fake_model_url() as url:
        yield url


@pytest.mark.parametrize(("page", "language"), OPENING.items())
def test_each_guide_opens_with_an_example(page: str, language: str) -> None:
    found = blocks(page, language)
    assert found and found[0][0] <= 40, f"docs/{page}: no {language} example in 40 lines"


@pytest.mark.timeout(180)
def test_the_agent_of_writing_an_agent_runs_and_the_test_of_testing_passes(
    tmp_path: Path,
) -> None:
    (tmp_path / "shouty.py").write_text(blocks("writing-an-agent.md", "python")[0][1])
    (tmp_path / "test_shouty.py").write_text(blocks("testing.md", "python")[0][1])
    chat = command_line("writing-an-agent.md", "acp-agent-kit chat")
    chat[2:2] = ["-p", "/shout hello"]
    done = run(chat, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "HELLO"
    tested = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert re.search(r"^\d+ passed in", tested.stdout, re.M), tested.stdout  # none skipped


@pytest.mark.timeout(180)
def test_the_pydantic_ai_agent_of_adapters_runs(tmp_path: Path, model_url: str) -> None:
    (tmp_path / "myagent.py").write_text(blocks("adapters.md", "python")[0][1])
    chat = command_line("adapters.md", "acp-agent-kit chat")
    chat[2:2] = ["-p", "hello"]
    done = run(chat, tmp_path, OPENAI_BASE_URL=model_url, OPENAI_API_KEY="test")
    assert done.returncode == 0, done.stderr
    # initialize announces the object's own agentInfo: pydantic-ai's
    assert "connected to pydantic-ai" in done.stderr, done.stderr
    assert "[end_turn]" in done.stderr, done.stderr
    assert done.stdout.strip()


@pytest.mark.timeout(120)
def test_the_language_model_agent_command_runs(tmp_path: Path, model_url: str) -> None:
    # the page's model, gpt-4.1-mini, is the fake endpoint's `fake`
    chat = [
        w.replace("gpt-4.1-mini", "fake") for w in command_line("llm-agent.md", "acp-agent-kit")
    ]
    assert chat[1:4] == ["--model", "fake", "chat"], chat
    done = run(chat, tmp_path, ACP_AGENT_BASE_URL=model_url, ACP_AGENT_API_KEY="test")
    assert done.returncode == 0, done.stderr
    assert "model: fake" in done.stderr
    assert done.stdout.strip()


@pytest.mark.timeout(120)
def test_the_serving_commands_serve_and_chat(tmp_path: Path) -> None:
    # the page's loopback server, on a free port instead of 8765, and its chat client
    serve = [w.replace(":8765", ":0") for w in command_line("serving.md", "acp-agent-kit serve")]
    assert serve[1:] == ["serve", "--listen", "127.0.0.1:0"], serve
    env = child_env({"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")})
    with subprocess.Popen(
        serve, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as server:
        try:
            assert server.stderr is not None
            line = server.stderr.readline()
            while line and "serving http://" not in line:
                line = server.stderr.readline()
            port = re.search(r"serving http://127\.0\.0\.1:(\d+)", line)
            assert port, f"serve printed no address: {line!r}"
            chat = [
                w.replace(":8765", f":{port[1]}")
                for w in command_line("serving.md", "acp-agent-kit chat")
            ]
            assert chat[1:3] == ["chat", "--url"], chat
            chat[2:2] = ["-p", "/echo served"]
            done = run(chat, tmp_path)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == "served"
        finally:
            server.terminate()
            server.wait(timeout=30)
