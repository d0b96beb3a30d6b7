"""Shell completion: `corral completion SHELL` prints click's script, and completing runs
`corral` with click's environment variables (as the script does), commands and queue names
included."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from corral import Queue
from corral.cli import main
from tests.conftest import free_port
from tests.test_cli import ROOT, cli, one_line_error

#: `corral` by the name the script calls it (the program name decides the variable).
CORRAL = [sys.executable, "-c", "from corral.cli import main; main(prog_name='corral')"]


def completion_env(shell: str, words: str, url: str | None) -> dict[str, str | None]:
    parts = words.split(" ")
    return {
        "_CORRAL_COMPLETE": f"{shell}_complete",
        "COMP_WORDS": words,
        # bash and zsh pass the index of the word completed, fish the word itself.
        "COMP_CWORD": parts[-1] if shell == "fish" else str(len(parts) - 1),
        "CORRAL_REDIS_URL": url,
        "REDIS_URL": None,
    }


def complete(shell: str, words: str, url: str | None = None) -> str:
    """What `corral` answers the completion script of ``shell`` for the line ``words`` (the
    last word being completed), run in this process."""
    result = CliRunner().invoke(main, [], prog_name="corral", env=completion_env(shell, words, url))
    assert (result.exit_code, result.stderr) == (0, ""), result.stderr
    return result.stdout


def complete_in_a_process(words: str, url: str | None, cwd: Path) -> str:
    """The same from a `corral` process of its own, in ``cwd``."""
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_REDIS_URL", "REDIS_URL")}
    env.update({k: v for k, v in completion_env("bash", words, url).items() if v is not None})
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        CORRAL, cwd=cwd, env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    return proc.stdout


def test_commands_complete_in_each_shell() -> None:
    assert complete("bash", "corral sta") == "plain,stats\n"
    assert complete("zsh", "corral sta").splitlines()[:2] == ["plain", "stats"]
    assert complete("fish", "corral sta").startswith("plain,stats\t")
    assert complete("bash", "corral schedulers q ").splitlines() == [
        "plain,list",
        "plain,remove",
        "plain,upsert",
    ]
    assert "plain,--every" in complete("bash", "corral schedulers q upsert x --ev").splitlines()


def test_queue_names_complete_from_the_server(redis_url: str) -> None:
    for name in ("emails", "events", "reports"):
        with Queue(name, connection=redis_url) as queue:
            queue.add("x", None)
    with Queue("other", connection=redis_url, prefix="{app}") as queue:
        queue.add("x", None)
    assert complete("bash", "corral jobs e", url=redis_url) == "plain,emails\nplain,events\n"
    assert complete_in_a_process("corral jobs e", redis_url, ROOT) == "plain,emails\nplain,events\n"
    assert complete("bash", "corral stats ", url=redis_url).splitlines() == [
        "plain,emails",
        "plain,events",
        "plain,reports",
    ]
    for line in (
        "corral schedulers r",
        "corral enqueue r",
        "corral cancel r",
        "corral retry r",
        "corral health -q r",
    ):
        assert complete("bash", line, url=redis_url) == "plain,reports\n", line
    # --url and --prefix typed before the QUEUE are the ones read.
    line = f"corral jobs --url {redis_url} --prefix {{app}} "
    assert complete("bash", line) == "plain,other\n"


def test_queue_completion_is_silent_on_failure(tmp_path: Path) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    assert complete("bash", "corral jobs e", url=down).strip() == ""
    assert complete("bash", "corral jobs e", url="http://nope/0").strip() == ""
    # No URL and no embedded server running: nothing, and no server is started for it.
    assert complete_in_a_process("corral jobs e", None, tmp_path).strip() == ""
    assert not (tmp_path / ".corral").exists()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_script(shell: str) -> None:
    result = cli("completion", shell)
    assert result.exit_code == 0, result.stderr
    assert f"_CORRAL_COMPLETE={shell}_complete" in result.stdout
    assert "corral" in result.stdout


def test_bash_script_registers_the_completion() -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = cli("completion", "bash").stdout
    proc = subprocess.run(
        [bash, "-c", 'eval "$SCRIPT" && complete -p corral'],
        env={**os.environ, "SCRIPT": script},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "complete -o nosort -F _corral_completion corral"


def test_completion_refuses_an_unknown_shell() -> None:
    line = one_line_error(cli("completion", "tcsh"), 2)
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in line
